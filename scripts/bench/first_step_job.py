"""The first-step benchmark's job: gloo, one all-reduce (its one training step), then rank 0 prints
one line to stderr (what ``torchx log`` shows on every scheduler), ``FIRST_STEP {json}``, of unix times: when its launcher (torchrun or ours) started, when
this script started, imported torch, joined the process group, finished the step and ended."""

import json
import os
import sys
import time

SCRIPT = time.time()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

IMPORTED = time.time()
dist.init_process_group("gloo")
JOINED = time.time()
value = torch.ones(1)
dist.all_reduce(value)
STEPPED = time.time()
assert value.item() == dist.get_world_size()
RANK = dist.get_rank()
dist.destroy_process_group()

LAUNCHERS = ("torchrun", "torch.distributed.run", "torchx_ext.launcher")


def launcher_started() -> float | None:
    """The start of the outermost ancestor that is a launcher (ours may fork a helper off itself)."""
    found = None
    pid = os.getppid()
    with open("/proc/uptime") as uptime:
        now_up, now = float(uptime.read().split()[0]), time.time()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                words = cmdline.read().decode(errors="replace").split("\0")
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            break
        if any(name in word for word in words for name in LAUNCHERS):
            found = now - (now_up - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
        pid = int(fields[1])
        if pid <= 1:
            break
    return found


if RANK == 0:
    print("FIRST_STEP " + json.dumps({"launcher": launcher_started(), "script": SCRIPT, "imported": IMPORTED,
                                      "joined": JOINED, "stepped": STEPPED, "ended": time.time()}), file=sys.stderr, flush=True)

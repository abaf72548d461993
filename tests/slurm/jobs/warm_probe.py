"""Says, as one JSON line per rank, what a worker was started with and by whom: its rank, world,
cwd, umask, CPUs and an awkward env value, and the command lines of its launcher and of every
process above it (a warm start's guardian and interpreter, or the step program)."""

import json
import os
from pathlib import Path

import torch.distributed as dist


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def command_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:300]


dist.init_process_group("gloo")
umask = os.umask(0)
os.umask(umask)
launcher = os.getppid()
chain = [launcher]
while chain[-1] > 1:
    chain.append(parent_of(chain[-1]))
print("PROBE " + json.dumps({
    "rank": dist.get_rank(), "world": dist.get_world_size(), "cwd": os.getcwd(), "umask": umask,
    "cpus": sorted(os.sched_getaffinity(0)), "value": os.environ.get("PROBE_VALUE"),
    "launcher": command_of(launcher), "above": [command_of(pid) for pid in chain[1:]],
}), flush=True)
dist.barrier()
dist.destroy_process_group()

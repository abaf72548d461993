"""Prints the process state a job's worker was given, one line each, for a warm and a cold run to
be compared: working directory, umask, core-size limit, CPUs, session, standard input, argv,
sys.path's first entry and a variable's exact value."""

import json
import os
import resource
import sys

def ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        found.append(pid)
    return found


def launcher() -> dict[str, object]:
    """The replica's launcher (the nearest ancestor running it), as /proc shows it."""
    for pid in ancestors(os.getpid()):
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = [part.decode() for part in cmdline.read().split(b"\0") if part]
        if argv[1:3] == ["-m", "torchx_ext.launcher"]:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                block = environ.read()
            return {"argv": argv[:3] + argv[3:4], "marker": b"TORCHX_EXT_LOCAL_JOB=" in block,
                    # A fork of the warm interpreter shows the room it was started with (400 KiB).
                    "forked": len(block) > 300_000, "stdin": os.readlink(f"/proc/{pid}/fd/0")}
    return {}


umask = os.umask(0)
os.umask(umask)
print("STATE " + json.dumps({
    "cwd": os.getcwd(),
    "umask": oct(umask),
    "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
    "cpus": sorted(os.sched_getaffinity(0)),
    "own_session": os.getsid(0) != os.getsid(int(os.environ.get("WARM_PID", "1"))),
    "stdin": os.readlink("/proc/self/fd/0"),
    "argv": sys.argv[1:],
    "path0": sys.path[0],
    "value": os.environ.get("TRICKY"),
    "warm": int(os.environ.get("WARM_PID", "0")) in ancestors(os.getpid()),
    "launcher": launcher(),
    "environ_has_marker": b"TORCHX_EXT_LOCAL_JOB=" in open("/proc/self/environ", "rb").read(),
}, sort_keys=True), flush=True)

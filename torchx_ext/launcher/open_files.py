"""The open-files limit of a process that serves or joins a large job.

The rendezvous store is served by node rank 0's launcher, and every node keeps four connections
to it (its agent's, its watchdog's two and its keep-alive's): 4,096 of them for 1,024 nodes. Linux
gives a process 1,024 open files by default (the soft limit), and many clusters raise only the hard
limit, which any process may raise its soft limit to. The workers inherit the raised limit.
"""

from __future__ import annotations

import resource
from pathlib import Path

NR_OPEN = Path("/proc/sys/fs/nr_open")


def open_files_ceiling() -> int:
    """The most open files this process may allow itself: its hard limit, or where that is
    unlimited, the kernel's cap on any process (``fs.nr_open``)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        return int(hard)
    try:
        return int(NR_OPEN.read_text())
    except (OSError, ValueError):
        return 1 << 20  # Linux's default fs.nr_open


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit on open files to ``open_files_ceiling``; (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = open_files_ceiling()
    if soft != resource.RLIM_INFINITY and soft >= ceiling:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
    except (OSError, ValueError):  # a kernel cap below the hard limit: keep the soft one
        return soft, soft
    return soft, ceiling

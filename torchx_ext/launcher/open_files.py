"""The open-files limit of a process that serves or joins a large job.

The rendezvous store is served by node rank 0's launcher, and every node keeps two connections to
it (its agent's and its watchdog's): 2,048 of them for 1,024 nodes. Linux gives a process 1,024
open files by default (the soft limit), and many clusters raise only the hard limit, which any
process may raise its soft limit to. The workers inherit the raised limit.
"""

from __future__ import annotations

import resource


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit on open files to its hard limit; (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):  # a kernel cap (fs.nr_open) below the hard limit: keep the soft one
        return soft, soft
    return soft, hard

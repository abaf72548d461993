"""Waiting for a job's records to change: what ``wait_for_change`` of local_cwd and slurm watch.

The records are files a job's supervisor or step wrapper writes (atomically, by rename). Their
metadata is compared every ``RECORD_CHECK_S``: a few ``stat`` calls, cheap enough to follow a
job closely, and unlike inotify it sees writes from other hosts on a network filesystem (a
Slurm job directory is written by the nodes).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

RECORD_CHECK_S = 0.05


def file_signature(path: Path) -> object:
    """What changes when ``path`` is written again or replaced; None while it does not exist."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def directory_names(path: Path) -> object:
    """The names in ``path`` (records appear as new files there)."""
    try:
        return frozenset(os.listdir(path))
    except OSError:
        return None


def wait_until_changed(signature: Callable[[], object], timeout_s: float,
                       check_s: float = RECORD_CHECK_S) -> bool:
    """True as soon as ``signature()`` differs from its value now; False after ``timeout_s``."""
    before = signature()
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(check_s, left))
        if signature() != before:
            return True

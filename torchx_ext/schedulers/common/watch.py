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
ENDING_WINDOW_S = 5.0
"""How long a job whose replicas all ended is re-read often, waiting for its scheduler to end it;
then at the caller's own pace (a Slurm job requeued and pending again, a long epilog, a Kubernetes
Job backing off before it replaces a pod)."""


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


class RecordWatch:
    """Waits for records to change, per app, from what the previous wait last saw: a change that
    came between two waits (while the caller read the job) wakes the next one at once."""

    def __init__(self) -> None:
        self._seen: dict[str, object] = {}

    def wait(self, app_id: str, signature: Callable[[], object], timeout_s: float,
             check_s: float = RECORD_CHECK_S) -> bool:
        """True as soon as ``signature()`` differs from what was last seen; False after ``timeout_s``."""
        current = signature()
        changed = app_id in self._seen and current != self._seen[app_id]
        self._seen[app_id] = current
        deadline = time.monotonic() + timeout_s
        while not changed and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(check_s, left))
            current = signature()
            changed = current != self._seen[app_id]
            self._seen[app_id] = current
        return changed


class EndingWindow:
    """How long each app has been ending (its replicas all ended, its scheduler not yet done)."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def brief(self, app_id: str, ending: bool) -> bool:
        """Whether ``app_id``, ``ending`` now, has been so for less than ``ENDING_WINDOW_S``."""
        if not ending:
            self._since.pop(app_id, None)
            return False
        since = self._since.setdefault(app_id, time.monotonic())
        return time.monotonic() - since < ENDING_WINDOW_S

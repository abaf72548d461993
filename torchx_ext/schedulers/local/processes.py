"""local_cwd's control of a job's processes through /proc: which live processes belong to a job
(by the marker every one of them inherits), whether a recorded one is still the same process,
and stopping them (SIGTERM, then SIGKILL after a grace period).

Standard library only: the supervisor imports this module and should start fast.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from torchx_ext.replica_env import REPLICA_ENV
from torchx_ext.schedulers.common.proc import process_start_ticks

__all__ = ["JOB_MARKER_ENV", "REPLICA_MARKER_ENV", "boot_id", "marked_processes", "process_start_ticks",
           "signal_process", "stop_processes"]

# Every process of a job carries this variable (children inherit it), which is how cancel
# finds workers that left their replica's process group.
JOB_MARKER_ENV = "TORCHX_EXT_LOCAL_JOB"
REPLICA_MARKER_ENV = REPLICA_ENV  # role/replica_id


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def marked_processes(app_id: str, replica: str | None = None) -> list[int]:
    """Live processes whose environment marks them as part of job ``app_id`` (and of its
    replica ``role/replica_id``, when given)."""
    marker = f"{JOB_MARKER_ENV}={app_id}".encode()
    replica_marker = None if replica is None else f"{REPLICA_MARKER_ENV}={replica}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as file:
                environ = file.read()
        except OSError:
            continue  # gone, or another user's
        variables = environ.split(b"\0")
        if marker not in variables or (replica_marker is not None and replica_marker not in variables):
            continue
        if process_start_ticks(int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


def stop_processes(find: Callable[[], Iterable[int]], grace_s: float, reap: Callable[[], None] = lambda: None) -> None:
    """SIGTERM what ``find`` returns, SIGKILL whatever is still there after ``grace_s``."""
    for pid in find():
        signal_process(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap()
        if not list(find()):
            return
        time.sleep(0.05)
    for pid in find():
        signal_process(pid, signal.SIGKILL)
    for _ in range(100):
        reap()
        if not list(find()):
            return
        time.sleep(0.05)


def signal_process(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

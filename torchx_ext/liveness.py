"""The liveness contract between a replica's launcher and its scheduler: a file touched every second.

A frozen or hung host makes no process exit, so a scheduler that only waits for exits keeps a
frozen replica forever. Where a scheduler sets ``TORCHX_EXT_LIVENESS_FILE`` (replica_env), the
launcher touches that file every ``INTERVAL_S`` from its first moment (``launcher/liveness.py``
beats it) and says in it how it stands: ``starting`` (may be ``STARTING_MAX_AGE_S`` old),
``starting, watched`` (a process of its own beats for it while it imports torch), ``running`` or
``spare`` (a hot spare). This module is the schedulers' side, standard library only (probes run
it every few seconds): the file's format, how old it may be, and the judges:

- a probe on the replica's host (a Docker HEALTHCHECK, a Kubernetes livenessProbe) runs
  ``python -m torchx_ext.launcher.liveness PATH MAX_AGE_S`` (``probe_command``; ``main`` here),
  which exits 0 while the file is younger than its limit and 1 otherwise (saying why); with
  ``--training PATH`` it exits 1 while the launcher waits as a spare (a readiness probe);
- judges on the launcher's host (local_cwd's supervisor, Slurm's step program) use ``FileWatch``,
  which times how long the file has not changed on the judge's own clock, not the file system's.
"""

from __future__ import annotations

import os
import re
import sys
import time

INTERVAL_S = 1.0
"""How often the launcher touches the file."""
DEFAULT_MAX_AGE_S = 10.0
"""A replica whose file is older than this is frozen: ten missed touches."""
STARTING_MAX_AGE_S = 60.0
"""How old the file may be while the launcher starts with no process beating for it."""
TRAINING_FLAG = "--training"
SPARE_WORD = "spare"
"""What a probe prints for a launcher waiting as a hot spare."""
STARTING, WATCHED, RUNNING = b"starting\n", b"starting, watched\n", b"running\n"
SPARE = b"spare\n"
"""A running launcher waiting as a hot spare (``launcher/spare.py``): as young as a running one."""
PROBE_MODULE = "torchx_ext.launcher.liveness"
"""What a probe runs (``python -m``). The launcher's module, not this one: an image may hold a
torchx_ext older than the submitter's, and that one answers only there."""


def probe_command(path: str, max_age_s: float = DEFAULT_MAX_AGE_S, python: str = "python") -> list[str]:
    """The argv of a probe (Docker HEALTHCHECK, Kubernetes livenessProbe) judging ``path``."""
    return [python, "-m", PROBE_MODULE, path, f"{max_age_s:g}"]


def training_probe_command(path: str, python: str = "python") -> list[str]:
    """The argv of a readiness probe: it fails while the launcher of ``path`` waits as a hot spare,
    so Kubernetes shows a spare's pod running and not ready."""
    return [python, "-m", PROBE_MODULE, TRAINING_FLAG, path]


def runs_our_launcher(entrypoint: str, args: list[str]) -> bool:
    """Whether a role starts our launcher with a Python interpreter the probe can run too: a probe
    on any other program (or behind a wrapper such as ``uv run``) would call a healthy replica
    frozen. Those replicas get no probe."""
    python = re.fullmatch(r"python(\d+(\.\d+)?)?", os.path.basename(entrypoint)) is not None
    return python and args[:2] == ["-m", "torchx_ext.launcher"]


def content(path: str) -> bytes:
    """What the file says (its first bytes); empty when it cannot be read."""
    try:
        with open(path, "rb") as file:
            return file.read(32)
    except OSError:
        return b""


def process_state(pid: int) -> str | None:
    """The state letter /proc gives process ``pid`` (``T``: stopped); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read().decode(errors="replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:][:1] or None


def max_age_s(path: str, limit_s: float = DEFAULT_MAX_AGE_S) -> float:
    """How old the file may be: ``limit_s``, or longer while the launcher is still starting."""
    return max(limit_s, STARTING_MAX_AGE_S) if content(path) == STARTING else limit_s


def is_spare(path: str) -> bool:
    """Whether the launcher of ``path`` says it waits as a hot spare."""
    return content(path) == SPARE


def age_s(path: str, now: float | None = None) -> float | None:
    """Seconds since ``path`` was last touched; None when it does not exist."""
    try:
        touched = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - touched)


class FileWatch:
    """How long a liveness file has not changed, on the caller's monotonic clock. ``pid``: the
    replica's launcher, on the caller's host; before it has written the file, it is silent only
    while it is stopped (SIGSTOP, a frozen cgroup): a slow interpreter start is not a frozen one."""

    def __init__(self, path: str, pid: int | None = None) -> None:
        self.path = path
        self.pid = pid
        self._seen: tuple[int, int] | None = None
        self._changed_at = 0.0
        self._stopped_since: float | None = None

    def silent_s(self, now: float | None = None) -> float | None:
        """Seconds since the file last changed (before it exists: how long ``pid`` has been
        stopped); None when there is nothing to judge."""
        now = time.monotonic() if now is None else now
        try:
            stat = os.stat(self.path)
        except OSError:
            return self._stopped_s(now) if self._seen is None else None
        if (stat.st_mtime_ns, stat.st_size) != self._seen:
            self._seen, self._changed_at = (stat.st_mtime_ns, stat.st_size), now
        return now - self._changed_at

    def frozen_for(self, now: float | None = None) -> float | None:
        """Seconds of silence once longer than the file allows (``max_age_s``), else None."""
        silent = self.silent_s(now)
        limit = max_age_s(self.path) if self._seen is not None else DEFAULT_MAX_AGE_S
        return silent if silent is not None and silent > limit else None

    def _stopped_s(self, now: float) -> float | None:
        state = process_state(self.pid) if self.pid else None
        if state is None or state not in "Tt":
            self._stopped_since = None
            return None
        if self._stopped_since is None:
            self._stopped_since = now
        return now - self._stopped_since


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == TRAINING_FLAG:
        return 1 if _says_spare(args[1]) else 0
    if len(args) != 2:
        print(f"usage: python -m {PROBE_MODULE} PATH MAX_AGE_S | {TRAINING_FLAG} PATH", file=sys.stderr)
        return 2
    path = args[0]
    limit = max_age_s(path, float(args[1]))
    age = age_s(path)
    if age is None:
        # Not written yet: a slow start, unless the container's first process (the launcher) is stopped.
        if (process_state(1) or "") in ("T", "t"):
            print(f"{path} does not exist and the launcher (pid 1) is stopped: frozen", file=sys.stderr)
            return 1
        return 0
    if age > limit:
        print(f"the launcher last touched {path} {age:.1f} s ago (more than {limit:g} s): frozen", file=sys.stderr)
        return 1
    if is_spare(path):
        print(SPARE_WORD)  # Docker keeps a probe's output in the container's health log: describe reads it
    return 0


def _says_spare(path: str) -> bool:
    if is_spare(path):
        print(f"the launcher waits as a hot spare ({path} says {SPARE_WORD})", file=sys.stderr)
        return True
    return False

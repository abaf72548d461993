"""A replica's sign of life for its scheduler: a file the launcher touches every second.

A frozen or hung host makes no process exit, so a scheduler that only waits for exits keeps a
frozen replica forever. Where a scheduler sets ``TORCHX_EXT_LIVENESS_FILE`` (replica_env), the
launcher touches that file from its first moment, before it imports torch, on a thread of its
own: neither a long training step nor a slow start delays it, only a frozen or hung launcher.
The scheduler then judges the file's age with its own means: local_cwd's supervisor reads it,
a Docker HEALTHCHECK or a Kubernetes livenessProbe runs

    python -m torchx_ext.launcher.liveness PATH MAX_AGE_S

which exits 0 while the file is younger than MAX_AGE_S seconds and 1 otherwise (saying why).
Until the launcher has imported what it needs, the file says ``starting`` and may be as old as
``STARTING_MAX_AGE_S``: loading a large C extension (torch's, from a cold or network file system)
holds the interpreter's lock and silences the touching thread meanwhile. Judges on the same host
as the launcher (local_cwd's supervisor, Slurm's step program) use ``FileWatch``, which times how
long the file has not changed on the judge's own clock, not the file system's.
Standard library only: probes run it every few seconds.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time

INTERVAL_S = 1.0
DEFAULT_MAX_AGE_S = 10.0
"""A replica whose file is older than this is frozen: ten missed touches."""
STARTING_MAX_AGE_S = 60.0
STARTING, RUNNING = b"starting\n", b"running\n"


def probe_command(path: str, max_age_s: float = DEFAULT_MAX_AGE_S, python: str = "python") -> list[str]:
    """The argv of a probe (Docker HEALTHCHECK, Kubernetes livenessProbe) judging ``path``."""
    return [python, "-m", "torchx_ext.launcher.liveness", path, f"{max_age_s:g}"]


def runs_our_launcher(entrypoint: str, args: list[str]) -> bool:
    """Whether a role starts our launcher with a Python interpreter the probe can run too: a probe
    on any other program (or behind a wrapper such as ``uv run``) would call a healthy replica
    frozen. Those replicas get no probe."""
    python = re.fullmatch(r"python(\d+(\.\d+)?)?", os.path.basename(entrypoint)) is not None
    return python and args[:2] == ["-m", "torchx_ext.launcher"]


def start_touching(path: str) -> None:
    """Write ``starting`` to ``path`` now, then touch it every second, for as long as this
    process lives."""
    _write(path, STARTING)

    def touch_forever() -> None:
        while True:
            time.sleep(INTERVAL_S)
            _touch(path)

    threading.Thread(target=touch_forever, name="torchx_ext: liveness", daemon=True).start()


def mark_running(path: str) -> None:
    """The launcher has imported what it needs: from now on the file may be DEFAULT_MAX_AGE_S old."""
    _write(path, RUNNING)


def max_age_s(path: str, limit_s: float = DEFAULT_MAX_AGE_S) -> float:
    """How old the file may be: ``limit_s``, or longer while the launcher is still starting."""
    try:
        with open(path, "rb") as file:
            starting = file.read(16) == STARTING
    except OSError:
        starting = False
    return max(limit_s, STARTING_MAX_AGE_S) if starting else limit_s


class FileWatch:
    """How long a liveness file has not changed, on the caller's monotonic clock."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._changed_at = 0.0

    def silent_s(self, now: float | None = None) -> float | None:
        """Seconds since the file last changed; None until it exists (not our launcher, or not
        started yet: nothing to judge)."""
        now = time.monotonic() if now is None else now
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        if (stat.st_mtime_ns, stat.st_size) != self._seen:
            self._seen, self._changed_at = (stat.st_mtime_ns, stat.st_size), now
        return now - self._changed_at

    def frozen_for(self, now: float | None = None) -> float | None:
        """Seconds of silence once longer than the file allows (``max_age_s``), else None."""
        silent = self.silent_s(now)
        return silent if silent is not None and silent > max_age_s(self.path) else None


def age_s(path: str, now: float | None = None) -> float | None:
    """Seconds since ``path`` was last touched; None when it does not exist."""
    try:
        touched = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - touched)


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except OSError:
        _write(path, RUNNING)  # removed meanwhile


def _write(path: str, content: bytes) -> None:
    try:
        with open(path, "wb") as file:
            file.write(content)
    except OSError:
        pass  # a full or read-only disk is not a frozen launcher: the file just ages


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m torchx_ext.launcher.liveness PATH MAX_AGE_S", file=sys.stderr)
        return 2
    path = args[0]
    limit = max_age_s(path, float(args[1]))
    age = age_s(path)
    if age is None:
        print(f"{path} does not exist: the launcher has not started", file=sys.stderr)
        return 1
    if age > limit:
        print(f"the launcher last touched {path} {age:.1f} s ago (more than {limit:g} s): frozen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

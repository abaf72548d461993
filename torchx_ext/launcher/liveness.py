"""A replica's sign of life for its scheduler: a file the launcher touches every second.

A frozen or hung host makes no process exit, so a scheduler that only waits for exits keeps a
frozen replica forever. Where a scheduler sets ``TORCHX_EXT_LIVENESS_FILE`` (replica_env), the
launcher touches that file from its first moment, before it imports torch, on a thread of its
own: neither a long training step nor a slow start delays it, only a frozen or hung launcher.
The scheduler then judges the file's age with its own means: local_cwd's supervisor reads it,
a Docker HEALTHCHECK or a Kubernetes livenessProbe runs

    python -m torchx_ext.launcher.liveness PATH MAX_AGE_S

which exits 0 while the file is younger than MAX_AGE_S seconds and 1 otherwise (saying why).
Loading a large C extension (torch's, from a cold or network file system) holds the interpreter's
lock and silences the touching thread meanwhile. So until the launcher has imported what it needs, a
process of its own, forked at its first moment, touches the file while the launcher lives and is not
stopped, for up to ``STARTING_WATCH_S`` (the file says ``starting, watched``): a replica that freezes
while it starts is told from a slow one within the usual 10 s. Where no such process can be made,
the file says ``starting`` and may be as old as ``STARTING_MAX_AGE_S`` meanwhile. Judges on the same host
as the launcher (local_cwd's supervisor, Slurm's step program) use ``FileWatch``, which times how
long the file has not changed on the judge's own clock, not the file system's.
Standard library only: probes run it every few seconds.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import sys
import threading
import time

INTERVAL_S = 1.0
DEFAULT_MAX_AGE_S = 10.0
"""A replica whose file is older than this is frozen: ten missed touches."""
STARTING_MAX_AGE_S = 60.0
"""How old the file may be while the launcher starts with no process beating for it."""
TRAINING_FLAG = "--training"
SPARE_WORD = "spare"
"""What a probe prints for a launcher waiting as a hot spare."""
STARTING_WATCH_S = 120.0
"""How long the starting beat vouches for a launcher that has not finished importing: one still
starting after two minutes (not stopped, but hung: a deadlock, a dead network file system) is
taken for hung 10 s later."""
STARTING, WATCHED, RUNNING = b"starting\n", b"starting, watched\n", b"running\n"
SPARE = b"spare\n"
"""A running launcher waiting as a hot spare (``launcher/spare.py``): as young as a running one."""
_beat: tuple[int, int] | None = None
"""(launcher pid, beating pid) of the process beating while the launcher starts (``start_touching``);
the beating pid is 0 when there is none."""


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
    """Start the starting beat (``starting, watched``; ``starting`` without one), then touch
    ``path`` every second, for as long as this process lives. Once per process."""
    global _beat
    if _beat is not None or threading.current_thread() is not threading.main_thread():
        return
    _write(path, WATCHED)
    _beat = (os.getpid(), _start_beat(path))
    if not _beat[1]:
        _write(path, STARTING)

    def touch_forever() -> None:
        while True:
            time.sleep(INTERVAL_S)
            _touch(path)

    threading.Thread(target=touch_forever, name="torchx_ext: liveness", daemon=True).start()


def mark_running(path: str) -> None:
    """The launcher has imported what it needs: from now on the file may be DEFAULT_MAX_AGE_S old,
    and its own thread is the only one to touch it."""
    global _beat
    _write(path, RUNNING)
    if _beat is not None and _beat[0] == os.getpid() and _beat[1]:  # ours, not a forked child's record
        try:
            os.kill(_beat[1], signal.SIGKILL)
            os.waitpid(_beat[1], 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # gone and reaped already
        _beat = (_beat[0], 0)


def _start_beat(path: str) -> int:
    """Fork the starting beat (before any thread is started); its pid, 0 where it cannot be."""
    launcher = os.getpid()
    if not os.path.exists(f"/proc/{launcher}/stat"):
        return 0
    try:
        pid = os.fork()
    except OSError:
        return 0
    if pid:
        return pid
    try:
        close_descriptors_except(set())  # the replica's output pipes must close when the launcher ends
        _beat_while_starting(launcher, path)
    finally:
        os._exit(0)


def _beat_while_starting(launcher: int, path: str) -> None:
    deadline = time.monotonic() + STARTING_WATCH_S
    while time.monotonic() < deadline:
        time.sleep(INTERVAL_S)
        state = _process_state(launcher)
        if state is None or state in "ZX" or _content(path) != WATCHED:
            return  # gone, or running: its own thread touches the file now
        if state not in "Tt":  # a stopped launcher (SIGSTOP, a frozen host) gets no beat
            try:
                os.utime(path)
            except OSError:
                return


def _process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read().decode(errors="replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:][:1] or None


def _content(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read(32)
    except OSError:
        return b""


def close_descriptors_except(keep: set[int]) -> None:
    """Close every descriptor of this process but ``keep``: those open are listed, not every
    number up to the limit (which may be a million, closed one by one where close_range is missing)."""
    try:
        open_now = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        open_now = list(range(min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1 << 16)))
    for descriptor in open_now:
        if descriptor not in keep:
            try:
                os.close(descriptor)
            except OSError:
                pass  # the listing's own, already closed


def max_age_s(path: str, limit_s: float = DEFAULT_MAX_AGE_S) -> float:
    """How old the file may be: ``limit_s``, or longer while the launcher is still starting."""
    return max(limit_s, STARTING_MAX_AGE_S) if _content(path) == STARTING else limit_s


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
        state = _process_state(self.pid) if self.pid else None
        if state is None or state not in "Tt":
            self._stopped_since = None
            return None
        if self._stopped_since is None:
            self._stopped_since = now
        return now - self._stopped_since


def age_s(path: str, now: float | None = None) -> float | None:
    """Seconds since ``path`` was last touched; None when it does not exist."""
    try:
        touched = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - touched)


def write_state(path: str, content: bytes) -> None:
    """Say ``content`` (RUNNING or SPARE) in the file; touching it goes on as before."""
    _write(path, content)


def is_spare(path: str) -> bool:
    """Whether the launcher of ``path`` says it waits as a hot spare."""
    return _content(path) == SPARE


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
    if len(args) == 2 and args[0] == TRAINING_FLAG:
        return 1 if _says_spare(args[1]) else 0
    if len(args) != 2:
        print(f"usage: python -m torchx_ext.launcher.liveness PATH MAX_AGE_S | {TRAINING_FLAG} PATH", file=sys.stderr)
        return 2
    path = args[0]
    limit = max_age_s(path, float(args[1]))
    age = age_s(path)
    if age is None:
        # Not written yet: a slow start, unless the container's first process (the launcher) is stopped.
        if (_process_state(1) or "") in ("T", "t"):
            print(f"{path} does not exist and the launcher (pid 1) is stopped: frozen", file=sys.stderr)
            return 1
        return 0
    if age > limit:
        print(f"the launcher last touched {path} {age:.1f} s ago (more than {limit:g} s): frozen", file=sys.stderr)
        return 1
    if is_spare(path):
        print(SPARE_WORD)  # Docker keeps a probe's output in the container's health log: describe reads it
    return 0


def training_probe_command(path: str, python: str = "python") -> list[str]:
    """The argv of a readiness probe: it fails while the launcher of ``path`` waits as a hot spare,
    so Kubernetes shows a spare's pod running and not ready."""
    return [python, "-m", "torchx_ext.launcher.liveness", TRAINING_FLAG, path]


def _says_spare(path: str) -> bool:
    if is_spare(path):
        print(f"the launcher waits as a hot spare ({path} says {SPARE_WORD})", file=sys.stderr)
        return True
    return False


if __name__ == "__main__":
    sys.exit(main())

"""The launcher's side of the liveness contract (``torchx_ext/liveness.py``): it beats the file.

The launcher touches its replica's liveness file from its first moment, before it imports torch,
on a thread of its own: neither a long training step nor a slow start delays it, only a frozen or
hung launcher. Loading a large C extension (torch's, from a cold or network file system) holds the
interpreter's lock and silences the touching thread meanwhile. So until the launcher has imported
what it needs, a process of its own, forked at its first moment, touches the file while the
launcher lives and is not stopped, for up to ``STARTING_WATCH_S`` (the file says ``starting,
watched``): a replica that freezes while it starts is told from a slow one within the usual 10 s.
Where no such process can be made, the file says ``starting`` and may be as old as
``STARTING_MAX_AGE_S`` meanwhile.

``python -m torchx_ext.launcher.liveness`` is the schedulers' probe (``torchx_ext.liveness.main``),
kept here for images whose torchx_ext predates that module. Standard library only.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time

from torchx_ext.liveness import INTERVAL_S, RUNNING, STARTING, WATCHED, content, main, process_state

STARTING_WATCH_S = 120.0
"""How long the starting beat vouches for a launcher that has not finished importing: one still
starting after two minutes (not stopped, but hung: a deadlock, a dead network file system) is
taken for hung 10 s later."""
_beat: tuple[int, int] | None = None
"""(launcher pid, beating pid) of the process beating while the launcher starts (``start_touching``);
the beating pid is 0 when there is none."""


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
        state = process_state(launcher)
        if state is None or state in "ZX" or content(path) != WATCHED:
            return  # gone, or running: its own thread touches the file now
        if state not in "Tt":  # a stopped launcher (SIGSTOP, a frozen host) gets no beat
            try:
                os.utime(path)
            except OSError:
                return


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


def write_state(path: str, content: bytes) -> None:
    """Say ``content`` (RUNNING or SPARE) in the file; touching it goes on as before."""
    _write(path, content)


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


if __name__ == "__main__":
    sys.exit(main())

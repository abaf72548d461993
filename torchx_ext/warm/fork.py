"""A Python module run in a fork of this interpreter, as ``python -m MODULE ARGS`` would run it
in a new one: what this interpreter imported is there already (torch, our launcher).

The child takes the job's state before anything of the job runs: a session and process group
of its own, umask, working directory, environment, ``sys.argv`` and ``sys.path[0]`` (``-m``
puts the working directory first), standard streams, and default signal handlers. It closes
every other descriptor it inherited (the parent's sockets, pipes and selectors). Only a
process with one thread may fork (``check_forkable``): a fork keeps the calling thread alone,
and a lock another thread held stays held forever in the child.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping

from torchx_ext.errors import TorchxExtError

WARM = False
"""Whether this process is such a fork: what it starts with our launcher, it forks too."""


class ForkedProcess:
    """The child, as far as its parent's bookkeeping needs (``subprocess.Popen``'s subset)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (the parent's waitpid(-1))
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                import subprocess

                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return self.returncode


class NoRoom(TorchxExtError):
    """The job's environment does not fit where /proc shows this process's (see ``_show_as``)."""


def check_forkable() -> None:
    import threading

    if threading.active_count() > 1:
        raise TorchxExtError(f"{threading.active_count()} threads run here: a fork would keep one, and their locks")


def run_module_in_fork(module: str, args: list[str], *, cwd: str, env: Mapping[str, str], umask: int,
                       streams: tuple[int, int, int], cpus: set[int] | None = None,
                       rlimits: Mapping[int, tuple[int, int]] | None = None) -> ForkedProcess:
    """``python -m module *args`` in a fork of this interpreter, with this state; ``streams``:
    the descriptors of its stdin, stdout and stderr (the caller closes its own)."""
    check_forkable()
    argv_block, env_block = _block([sys.executable, "-m", module, *args]), _block(f"{key}={value}" for key, value in env.items())
    argv_room, env_room = _rooms()
    if len(env_block) > env_room:
        raise NoRoom(f"the environment ({len(env_block)} bytes) does not fit in {env_room} bytes")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # else the child would write the parent's buffered lines again
    pid = os.fork()
    if pid:
        return ForkedProcess(pid)
    global WARM
    WARM = True
    code = 1
    try:
        _become(module, args, cwd, env, umask, streams, cpus, rlimits)
        _show_as(argv_block[:max(0, argv_room - 1)], env_block)  # a cmdline ends with its NUL
        import runpy

        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # noqa: B036 - the child reports anything, then ends
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _become(module: str, args: list[str], cwd: str, env: Mapping[str, str], umask: int,
            streams: tuple[int, int, int], cpus: set[int] | None, rlimits: Mapping[int, tuple[int, int]] | None) -> None:
    os.setsid()
    for target, descriptor in enumerate(streams):
        if descriptor != target:
            os.dup2(descriptor, target)
    signal.set_wakeup_fd(-1)
    os.closerange(3, max_descriptors())
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        handler = signal.getsignal(sig)
        if callable(handler) and handler is not signal.default_int_handler:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.umask(umask)
    if rlimits:
        import resource

        for kind, (soft, hard) in rlimits.items():
            try:
                resource.setrlimit(kind, (soft, hard))
            except (ValueError, OSError):  # above this process's hard limit: the nearest it may have
                ceiling = resource.getrlimit(kind)[1]
                below = ceiling if ceiling == resource.RLIM_INFINITY else min(
                    ceiling, ceiling if soft == resource.RLIM_INFINITY else soft)
                resource.setrlimit(kind, (below, ceiling))
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [module, *args]
    sys.path[0] = cwd


def _block(strings: Iterable[str]) -> bytes:
    return b"".join(os.fsencode(text) + b"\0" for text in strings)


def _rooms() -> tuple[int, int]:
    """The sizes of this process's argument and environment areas, whose bytes /proc shows as its
    cmdline and environ (``ps``, and how local_cwd finds a job's processes by their marker)."""
    arg_start, arg_end, env_start, env_end = _areas()
    return arg_end - arg_start, env_end - env_start


def _areas() -> tuple[int, int, int, int]:
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # Fields 48 to 51 of proc(5), counted from the state (field 3) here.
    return int(fields[45]), int(fields[46]), int(fields[47]), int(fields[48])


def _show_as(argv: bytes, env: bytes) -> None:
    """Writes ``argv`` and ``env`` over the areas the kernel shows as this process's cmdline and
    environ, as an exec would have: a fork shows its parent's otherwise. The C library's
    ``environ`` no longer points there (``os.environ`` set every variable anew); a pointer kept
    from a ``getenv`` while the interpreter imported torch would now read the job's bytes, the
    price of the rewrite. The warm interpreter is started with room to spare in both areas
    (``client.start_server``)."""
    import ctypes

    arg_start, arg_end, env_start, env_end = _areas()
    for start, end, data in ((arg_start, arg_end, argv), (env_start, env_end, env)):
        ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)


def show_command(words: list[str]) -> None:
    """Shows ``words`` as this process's cmdline (``ps``), within the room it has; its environ
    stays as it is."""
    import ctypes

    arg_start, arg_end, _, _ = _areas()
    data = _block(words)[:max(0, arg_end - arg_start - 1)]
    ctypes.memmove(arg_start, data + b"\0" * (arg_end - arg_start - len(data)), arg_end - arg_start)


def max_descriptors() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1

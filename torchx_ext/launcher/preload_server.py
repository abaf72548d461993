"""The forkserver that preloaded workers are forked from, kept to one launcher call.

multiprocessing keeps one forkserver per process, in module state, and never stops it. A
launcher that returns to its caller (``main(argv)`` called in-process, ``launch``) must
therefore take care of three things multiprocessing does not:

- a server started by an earlier call holds that call's environment: workers forked from it
  would get stale variables, so each call stops the server it started;
- after ``os.fork()`` the child inherits the parent's record of the server, which is not the
  child's own process: multiprocessing's liveness check (``waitpid``) then fails with
  ChildProcessError, so the child forgets that record and starts its own server;
- a server the caller started itself is the caller's: it is neither used for our script
  workers (its environment and preloads are not this call's) nor stopped.

The launcher's own server (``start_early``) is a fork of the launcher taken right after it imported
what workers preload, before it starts any thread but its liveness touch: one import of torch
in all, not one in the launcher and another in a server spawned beside it. On a replica with one
or two CPUs (a sliced container, a Slurm task) two imports side by side take twice as long.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn
from multiprocessing import forkserver

from torchx_ext.launcher.liveness import close_descriptors_except

logger = logging.getLogger("torchx_ext.launcher")

# What user scripts import first and takes longest: a preloaded worker finds it imported.
PRELOAD_MODULES = ("torch", "torch.distributed")
ignores_sigterm = False
"""True in the server (and so in the workers it forks, which give SIGTERM its default action back)."""


def start_early(argv: Sequence[str]) -> bool:
    """Import what workers preload, then start the server as a fork of this process (see the
    module's docstring). Judged from the raw arguments (parsing them imports torch); when in doubt
    it is not started here, and torch starts one the usual way when the first worker is created."""
    fresh = ("--no-python", "--no_python", "--run-path", "--run_path", "--worker-start=fresh", "--worker_start=fresh")
    if any(arg in fresh for arg in argv) or "fresh" in argv or os.environ.get("PYTHON_EXEC", sys.executable) != sys.executable:
        return False
    forget_inherited()
    forkserver.set_forkserver_preload(list(PRELOAD_MODULES))
    for name in PRELOAD_MODULES:
        importlib.import_module(name)
    _fork_server()
    return True


def _fork_server() -> None:
    """What ``forkserver.ensure_running`` does, with ``os.fork`` in place of a new interpreter."""
    from multiprocessing import connection, resource_tracker

    server = _server()
    with server._lock:
        resource_tracker.ensure_running()  # as ensure_running: workers get its descriptor
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]  # private
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(address)
            os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()  # every client holds the write end; EOF ends the server
            launcher = os.getpid()
            pid = os.fork()
            if pid == 0:
                _serve_in_fork(listener.fileno(), alive_r, alive_w, launcher)
            os.close(alive_r)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid


def _serve_in_fork(listener_fd: int, alive_r: int, alive_w: int, launcher: int) -> NoReturn:
    code = 1
    try:
        os.close(alive_w)
        # The launcher's record of its server (and that record's lock, held at the fork) is not
        # this process's: a worker that starts a forkserver of its own must find none, unlocked.
        _reset(_server())
        close_descriptors_except({0, 1, 2, listener_fd, alive_r})
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # not the launcher's locked wrappers
        # A cancel signals the replica's process group (torchx's local_cwd does): the server must
        # outlive it until the launcher has stopped the workers, who are its children; else the
        # launcher takes them for ended and leaves at once, and their grace is lost. It ends with
        # the launcher all the same: its clients' pipe, or (SIGKILLed launcher) the parent's death.
        global ignores_sigterm
        ignores_sigterm = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _die_with_parent(launcher)
        forkserver.main(listener_fd, alive_r, list(PRELOAD_MODULES))
    except SystemExit:
        code = 0  # its clients are gone
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _die_with_parent(launcher: int) -> None:
    """SIGKILL this process when the thread that forked it (the launcher's main thread) ends.
    ``launcher``: its pid, which may be 1 (a container's first process), so it is compared, not 1."""
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the clients' pipe still ends it
        return
    if os.getppid() != launcher:  # the launcher died before the call
        os._exit(0)


def is_running() -> bool:
    return _server()._forkserver_pid is not None


def forget_inherited() -> None:
    """Drop the record of a server that this process did not start (it was forked from the
    process that did), so that multiprocessing starts one of its own when one is needed."""
    server = _server()
    pid = server._forkserver_pid
    if pid is None:
        return
    try:
        # WNOWAIT: a dead child of ours stays for multiprocessing to reap and restart.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return
    except ChildProcessError:
        pass
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)  # the parent's server must not live on for us
    _reset(server)


def stop() -> None:
    """Stop the server this process started; nothing when none runs."""
    server = _server()
    with server._lock:
        pid, address = server._forkserver_pid, server._forkserver_address
        if pid is None:
            return
        os.close(server._forkserver_alive_fd)
        # Closing the pipe would end it too, but only once it is idle (not while it imports
        # torch), after an interpreter teardown of ~0.3 s, and not at all while an orphan a
        # worker left behind holds the pipe. It keeps nothing worth a clean exit: kill it.
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # already gone and reaped (by a SIGCHLD handler of the caller's, say)
        if isinstance(address, str) and not address.startswith("\0"):
            try:
                os.unlink(address)
            except FileNotFoundError:
                pass
        _reset(server)


@contextmanager
def server_of_this_call(started_early: bool = False) -> Iterator[bool]:
    """Scope a launcher call: yields whether a server this call did not start is running (the
    caller's own); on exit, stops the server this call started and restores the preload list."""
    forget_inherited()
    server = _server()
    preload = list(server._preload_modules)
    callers = is_running() and not started_early
    try:
        yield callers
    finally:
        if not callers and is_running():
            stop()
        server._preload_modules = preload


def _server() -> Any:
    # Any: the fields used here (_forkserver_pid, _forkserver_alive_fd, _forkserver_address,
    # _preload_modules, _lock) are private, so not typed, and the same in Python 3.10 to 3.13.
    return forkserver._forkserver


def _reset(server: Any) -> None:
    # Its own constructor clears every field on any Python version; the module-level
    # functions (ensure_running, connect_to_new_process) stay bound to this same object.
    preload = list(server._preload_modules)
    type(server).__init__(server)
    server._preload_modules = preload

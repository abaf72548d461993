"""A launcher forked by a Slurm node's warm interpreter for a job's step program, which waits for
it as for a child of its own (``-cfg warm=true`` in an allocation).

The launcher cannot be the step program's child: the interpreter that has torch imported is
another process, in a step of its own. So the server forks a *guardian* per request, which forks
the launcher with the job's state and stays its parent, holding the step program's connection:

- the guardian answers ``{"pid": launcher}`` first and ``{"exit": code}`` at the end (negative:
  the signal that ended it, as ``subprocess`` says it);
- the step program sends ``{"signal": N}`` for each signal Slurm sends it, passed on to the
  launcher as the step program would pass it to a child;
- the connection's end without a word (the step program killed: ``scancel``, the step's end)
  kills the launcher and everything it started, as Slurm kills a step's processes.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchx_ext.warm.server import job_state, receive, send

def guard(connection: socket.socket, listener: socket.socket, request: dict[str, Any],
          streams: tuple[int, int, int]) -> int:
    """Forks the guardian of ``request``'s launcher; its pid. The caller closes its own copies of
    ``connection`` and ``streams``."""
    from torchx_ext.warm import fork

    fork.check_forkable()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        # The server's reaper would take the launcher's end before the guardian could read it.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})  # blocked by the server while it forked
        listener.close()
        _close_all_but({connection.fileno(), *streams})  # the server's lock among them
        launcher = fork.run_module_in_fork(request["module"], list(request["args"]), streams=streams,
                                           **job_state(request))
        for descriptor in set(streams):
            os.close(descriptor)  # the launcher's end alone closes the step program's pipes
        fork.show_command([sys.executable, "-m", "torchx_ext.warm", "guard", str(launcher.pid)])  # not a second server
        connection.settimeout(None)
        _relay(connection, launcher.pid)
        code = 0
    except BaseException:  # noqa: B036 - a guardian never returns into the server's loop
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _close_all_but(keep: set[int]) -> None:
    low = 3
    from torchx_ext.warm.fork import max_descriptors

    for descriptor in sorted(keep | {max_descriptors()}):
        if descriptor >= low:
            os.closerange(low, descriptor)
            low = descriptor + 1


def _relay(connection: socket.socket, pid: int) -> None:
    """Says ``pid`` to the step program, passes its signals on and says how it ended; kills it
    with everything below it when the step program is gone, even before it heard the pid."""
    from torchx_ext.schedulers.common.proc import kill_tree

    ended = os.pidfd_open(pid)
    try:
        send(connection, {"pid": pid})
    except OSError:
        kill_tree(pid)
        os.waitpid(pid, 0)
        return
    while True:
        ready, _, _ = select.select([connection.fileno(), ended], [], [])
        if ended in ready:
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            try:
                send(connection, {"exit": code})
            except OSError:
                pass  # the step program is gone: nothing waits for the end
            return
        try:
            message, descriptors = receive(connection)
        except (OSError, ValueError):
            kill_tree(pid)  # the step program is gone: so is its step
            os.waitpid(pid, 0)
            return
        for descriptor in descriptors:
            os.close(descriptor)
        number = message.get("signal")
        if isinstance(number, int):
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass


class AttachedProcess:
    """The launcher a node's warm interpreter forked for this process: the part of
    ``subprocess.Popen`` the step program uses. Its end comes over the connection; this process's
    end (the connection's) ends it."""

    def __init__(self, connection: socket.socket, pid: int) -> None:
        self._connection = connection
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._connection], [], [], 0)[0]:
            self._read_end()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._connection], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            self._read_end()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            try:
                send(self._connection, {"signal": int(number)})
            except OSError:
                pass

    def _read_end(self) -> None:
        try:
            code = receive(self._connection)[0].get("exit")
        except (OSError, ValueError):
            code = None
        # A guardian gone without a word (killed with its step): as a launcher killed would say.
        self.returncode = code if isinstance(code, int) else -signal.SIGKILL
        self._connection.close()


def attach_module(path: Path, module: str, args: list[str], *, cwd: str, env: Mapping[str, str],
                  streams: tuple[int, int, int]) -> AttachedProcess | None:
    """``python -m module *args`` forked by the warm interpreter at ``path`` with this process's
    umask, rlimits and CPUs and the given ``cwd``, ``env`` and streams, attached to this process;
    None when none answers there or it cannot run this one (the caller starts it itself)."""
    from torchx_ext.warm.client import connect, exchange, run_request

    try:
        connection = connect(path)
    except OSError:
        return None
    try:
        pid = exchange(connection, {**run_request(module, args, cwd, env), "op": "attach"}, list(streams)).get("pid")
        if not isinstance(pid, int):
            raise ValueError(f"no pid in the answer: {pid!r}")
        connection.settimeout(None)
        return AttachedProcess(connection, pid)
    except (OSError, ValueError):
        connection.close()
        return None

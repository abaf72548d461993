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

from torchx_ext.warm.protocol import connect, exchange, job_state, receive, run_request, send

def guard(connection: socket.socket, listener: socket.socket, request: dict[str, Any],
          streams: tuple[int, int, int]) -> int:
    """Forks the guardian of ``request``'s launcher; its pid. The caller closes its own copies of
    ``connection`` and ``streams``."""
    from torchx_ext.warm import fork

    fork.check_forkable()
    pid = os.fork()
    if pid:
        return pid
    code, launcher = 1, None
    try:
        # The server's reaper would take the launcher's end before the guardian could read it.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})  # blocked by the server while it forked
        listener.close()
        _close_all_but({connection.fileno(), *streams})  # the server's lock among them
        connection.settimeout(None)
        try:
            launcher = fork.run_module_in_fork(request["module"], list(request["args"]), streams=streams,
                                               **job_state(request)).pid
        except fork.NoRoom as error:
            send(connection, {"error": str(error)})  # the step program starts it anew
            code = 0
            return 0  # in the guardian: its finally ends it
        for descriptor in set(streams):
            os.close(descriptor)  # the launcher's end alone closes the step program's pipes
        fork.show_command([sys.executable, "-m", "torchx_ext.warm", "guard", str(launcher)])  # not a second server
        _relay(connection, launcher)
        code = 0
    except BaseException:  # noqa: B036 - a guardian never returns into the server's loop
        import traceback

        traceback.print_exc()
        if launcher is not None:
            _end_tree(launcher)  # nobody would wait for it, pass it signals or end it
    finally:
        os._exit(code)


def _close_all_but(keep: set[int]) -> None:
    """Closes every descriptor from 3 up but ``keep``: the server's listener, lock and whatever
    torch's import opened are not the guardian's."""
    from torchx_ext.warm.fork import max_descriptors

    low = 3
    for descriptor in sorted(keep | {max_descriptors()}):
        if descriptor >= low:
            os.closerange(low, descriptor)
            low = descriptor + 1


def _end_tree(pid: int) -> None:
    from torchx_ext.schedulers.common.proc import kill_tree

    kill_tree(pid)
    os.waitpid(pid, 0)


def _relay(connection: socket.socket, pid: int) -> None:
    """Says ``pid`` to the step program, passes its signals on and says how it ended; kills it
    with everything below it when the step program is gone, even before it heard the pid. Its
    end wakes the loop through SIGCHLD's wakeup pipe (no pidfd: kernels before 5.3 lack it)."""
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the signal writes to the pipe
    try:
        send(connection, {"pid": pid})
    except OSError:
        _end_tree(pid)
        return
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            try:
                send(connection, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass  # the step program is gone: nothing waits for the end
            return
        ready, _, _ = select.select([connection.fileno(), woken], [], [], 1.0)
        if woken in ready:
            os.read(woken, 512)
        if connection.fileno() not in ready:
            continue
        try:
            message, descriptors = receive(connection)
        except (OSError, ValueError):
            _end_tree(pid)  # the step program is gone: so is its step
            return
        for descriptor in descriptors:
            os.close(descriptor)
        number = message.get("signal")
        if message.get("tree"):
            _end_tree(pid)  # found frozen by the step program: it and everything below it
        elif isinstance(number, int):
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass


class AttachedProcess:
    """The launcher a node's warm interpreter forked for this process: the part of
    ``subprocess.Popen`` the step program uses. Its end comes over the connection; this process's
    end (the connection's) ends it. ``send_signal`` may be called from a signal handler: it only
    writes (one small message, one write), and reads nothing."""

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
        self._say({"signal": int(number)})

    def kill_tree(self) -> None:
        """SIGKILL the launcher and everything below it, by its guardian (which alone knows that
        the pid is still the launcher's)."""
        self._say({"tree": True})

    def _say(self, message: dict[str, Any]) -> None:
        if self.returncode is None:
            try:
                send(self._connection, message)
            except OSError:
                pass

    def _read_end(self) -> None:
        try:
            code = receive(self._connection)[0].get("exit")
        except (OSError, ValueError):
            code = None
        if not isinstance(code, int):
            # The guardian went without a word (killed): what it guarded must not outlive it.
            from torchx_ext.schedulers.common.proc import kill_tree

            kill_tree(self.pid)
            code = -signal.SIGKILL
        self.returncode = code
        self._connection.close()


def attach_module(path: Path, module: str, args: list[str], *, cwd: str, env: Mapping[str, str],
                  streams: tuple[int, int, int]) -> AttachedProcess | None:
    """``python -m module *args`` forked by the warm interpreter at ``path`` with this process's
    umask, rlimits and CPUs and the given ``cwd``, ``env`` and streams, attached to this process;
    None when none answers there or it cannot run this one (the caller starts it itself)."""
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

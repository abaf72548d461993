"""Asking the warm interpreter (``server.py``) to run a module for a job, and to say how it is or
to stop. Standard library only, and quick: the torchx CLI calls it on each local job's submission.
Whatever goes wrong costs at most a cold start: the caller gets None and starts the process
itself, and a new server is started, detached, for the next job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchx_ext.warm.protocol import connect, exchange, run_request
from torchx_ext.warm.server import runs_or_starts, socket_path



def run_module(module: str, args: list[str], *, cwd: str, env: Mapping[str, str],
               streams: tuple[int, int, int]) -> int | None:
    """The pid of ``python -m module *args`` forked by the warm interpreter with this process's
    umask, rlimits and CPUs and the given ``cwd``, ``env`` and standard streams; None when no warm
    interpreter answered (one is then started for the next call)."""
    request = {**run_request(module, args, cwd, env), "op": "run"}
    try:
        path = socket_path()
        answer = ask(path, request, list(streams))
    except OSError as error:
        _tell(streams[2], f"no warm interpreter answered ({error!r}): starting cold")
        start_server()  # none answers: one for the next job (unless one is starting)
        return None
    except ValueError as error:
        # It answered, but cannot run this one (its environment too large), or broke off: cold.
        _tell(streams[2], f"the warm interpreter did not run it ({error}): starting cold")
        return None
    pid = answer.get("pid")
    return pid if isinstance(pid, int) else None


CLIENT_SAYS = " warm client: "
"""What marks the client's own lines in a started process's log."""


def _tell(stream: int, line: str) -> None:
    """One line on the started process's standard error (its log): why it started cold. A late
    answer may still fork one; the one that starts second sees that and ends."""
    try:
        os.write(stream, f"{time.strftime('%H:%M:%S')}{CLIENT_SAYS}{line}\n".encode())
    except OSError:
        pass


def ask(path: Path, request: dict[str, Any], descriptors: list[int] | None = None) -> dict[str, Any]:
    with connect(path) as connection:
        return exchange(connection, request, descriptors)


def start_server() -> None:
    """Starts a warm interpreter for this environment, detached (in the background: the job that
    found none starts cold meanwhile)."""
    try:
        path = socket_path()
        if runs_or_starts(path):
            return
        log = os.fdopen(os.open(path.with_suffix(".log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600), "ab")
    except OSError:
        return
    with log:
        subprocess.Popen([sys.executable, "-m", "torchx_ext.warm", "serve", str(path), ARGV_ROOM_ARGUMENT],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/", start_new_session=True,
                         env={**os.environ, **room_environment()})


def room_environment() -> dict[str, str]:
    """Room in a warm interpreter's environment area for those of the processes it forks (fork.py)."""
    return {f"TORCHX_EXT_WARM_ROOM_{index}": "." * ROOM_PER_VARIABLE for index in range(ENV_ROOM_VARIABLES)}


ARGV_ROOM = 32 << 10
ARGV_ROOM_ARGUMENT = " " * ARGV_ROOM
"""Room in its argument area for the command lines of the processes it forks."""
ROOM_PER_VARIABLE = 100 << 10
"""Below the kernel's limit on one argument or variable (128 KiB)."""
ENV_ROOM_VARIABLES = 4


def status() -> dict[str, Any] | None:
    """What the warm interpreter of this environment says of itself; None when none answers."""
    try:
        return ask(socket_path(), {"op": "status"})
    except (OSError, ValueError):
        return None


def stop() -> int | None:
    """Ends the warm interpreter of this environment; its pid, None when none answered."""
    try:
        pid = ask(socket_path(), {"op": "stop"}).get("stopped")
    except (OSError, ValueError):
        return None
    return pid if isinstance(pid, int) else None

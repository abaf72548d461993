"""What many test modules share: a torchx Runner (a fixture, registered in tests/conftest.py),
the torchx CLI in a process of its own, a free port, and whether a process is alive.

State roots come from the code's own constant (``STATE_ROOT_ENV``), never spelled again here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from torchx.runner import Runner, get_runner

from torchx_ext.schedulers.local.records import STATE_ROOT_ENV

# The torchx CLI of the interpreter running the tests, whatever is on PATH.
TORCHX = [sys.executable, "-c", "import sys; from torchx.cli.main import main; sys.exit(main())"]

__all__ = ["STATE_ROOT_ENV", "TORCHX", "alive", "free_port", "runner", "torchx"]


@pytest.fixture
def runner() -> Iterator[Runner]:
    """torchx's Runner, as a user's script makes it; closing it cancels whatever a failed test
    left running."""
    with get_runner() as made:
        yield made


def torchx(*args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None, timeout: float = 120,
           command: Sequence[str] = TORCHX, base_env: Mapping[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    """``torchx ARGS`` run to its end: this interpreter's CLI, or ``command`` (an installed
    script), with ``env`` added to ``base_env`` (default: the tests' environment)."""
    environ = {**(os.environ if base_env is None else base_env), **(env or {})}
    return subprocess.run([*command, *args], env=environ, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick; free until someone takes it)."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return int(probe.getsockname()[1])


def free_port_pair() -> int:
    """A port P with P + 1 free too, both now (a torchft lighthouse's pair: dist.hsdp --lighthouse_port)."""
    for _ in range(100):
        port = free_port()
        if port < 65535:
            with socket.socket() as first, socket.socket() as second:
                try:
                    first.bind(("localhost", port))
                    second.bind(("localhost", port + 1))
                except OSError:
                    continue
            return port
    raise AssertionError("no two consecutive free ports in 100 tries")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped) is dead for every purpose here."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def still_there(found: Callable[[], list[str]], settle_s: float, poll_s: float = 0.1) -> list[str]:
    """What ``found`` still reports after giving it up to ``settle_s`` to go (0: what it reports now)."""
    deadline = time.monotonic() + settle_s
    while (what := found()) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return what


RESTART_TIMES_ENV = "TORCHX_EXT_RESTART_TIMES"
"""A file that fault tests append their restarts' times to (scripts/test.sh sets it and writes the
slowest of each test in the run's summary, so a drift shows before it crosses a bound)."""


def record_restart(what: str, seconds: float, bound_s: float) -> None:
    """Note one measured recovery (``what`` it is, in this test) against the bound its test asserts,
    before the assert: a failing run notes it too."""
    path = os.environ.get(RESTART_TIMES_ENV)
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    line = json.dumps({"test": test, "what": what, "seconds": round(seconds, 2), "bound_s": bound_s,
                       "line": os.environ.get("TORCHX_EXT_LINE", "")})
    with open(path, "a") as file:  # one short line per write: lanes appending at once do not interleave
        file.write(line + "\n")

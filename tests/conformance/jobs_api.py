"""Waiting on jobs through torchx's Runner, as a user's script would: shared by the suites."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from torchx.runner import Runner
from torchx.specs import AppState, AppStatus



def wait(runner: Runner, handle: str, timeout_s: float = 120) -> AppState:
    """The terminal state of ``handle``, polling as `torchx run` does (only faster)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = runner.status(handle)
        assert status is not None, f"{handle} vanished"
        if status.is_terminal():
            return status.state
        time.sleep(0.2)
    raise AssertionError(f"{handle} still {runner.status(handle)} after {timeout_s} s")


def status_until(runner: Runner, handle: str, check: Callable[[AppStatus], bool], timeout_s: float = 60) -> AppStatus:
    """The first status of ``handle`` that passes ``check``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = runner.status(handle)
        if status is not None and check(status):
            return status
        time.sleep(0.2)
    raise AssertionError(f"{handle}: no status passed the check in {timeout_s} s; now {runner.status(handle)}")


def wait_for_line(runner: Runner, handle: str, role: str, replica: int, pattern: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(re.search(pattern, line) for line in runner.log_lines(handle, role, replica)):
            return
        time.sleep(0.2)
    raise AssertionError(f"no line matching {pattern!r} from {role}/{replica} within {timeout_s} s")

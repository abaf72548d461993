"""A process forked by the warm interpreter for another that waits for it as for a child of its
own (``attach``: how a Slurm step program gets its launcher warm): its end, signals sent back to
back, and the waiting process's end. Here on the local warm interpreter; on Slurm nodes by
tests/slurm/test_allocation_warm.py."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import alive, still_there
from tests.warm_helpers import ensure_warm
from torchx_ext.warm.attach import AttachedProcess, attach_module
from torchx_ext.warm.server import socket_path

PROGRAM = '''
import signal, sys, time

got = []

def said(signum, _frame):
    print(signal.Signals(signum).name, flush=True)
    got.append(signum)

signal.signal(signal.SIGCONT, said)
signal.signal(signal.SIGTERM, said)
print("ready", flush=True)
if sys.argv[1:] == ["quick"]:
    sys.exit(3)
while signal.SIGTERM not in got:
    time.sleep(0.05)
time.sleep(0.3)  # Python runs pending handlers by signal number: SIGCONT's may come after
sys.exit(7)
'''


@pytest.fixture
def program(tmp_path: Path) -> Iterator[Path]:
    ensure_warm()
    (tmp_path / "signalled.py").write_text(PROGRAM)
    yield tmp_path


def attach(cwd: Path, *args: str) -> tuple[AttachedProcess, int]:
    """The program attached, and the read end of its output."""
    read, write = os.pipe()
    with open(os.devnull, "rb") as nothing:
        attached = attach_module(socket_path(), "signalled", list(args), cwd=str(cwd), env={"PATH": os.defpath},
                                 streams=(nothing.fileno(), write, write))
    os.close(write)
    assert attached is not None, "the warm interpreter did not fork it"
    return attached, read


def output(read: int, until: str, timeout_s: float = 30) -> str:
    text, deadline = "", time.monotonic() + timeout_s
    while until not in text and time.monotonic() < deadline:
        data = os.read(read, 4096)
        if not data:
            break
        text += data.decode()
    return text


def test_an_attached_process_that_ends_at_once_says_its_exit_code(program: Path) -> None:
    attached, read = attach(program, "quick")
    assert attached.wait(timeout=30) == 3  # its pid and its end may arrive in one read
    assert output(read, "ready\n") == "ready\n"


def test_signals_sent_back_to_back_all_reach_it_and_its_own_exit_code_comes_back(program: Path) -> None:
    attached, read = attach(program)
    assert output(read, "ready\n") == "ready\n"
    attached.send_signal(signal.SIGCONT)  # as scancel sends them: SIGCONT, then SIGTERM at once
    attached.send_signal(signal.SIGTERM)
    assert attached.wait(timeout=30) == 7, "killed, not terminated: a signal was lost"
    assert sorted(output(read, "\n").split() + output(read, "\n").split()) == ["SIGCONT", "SIGTERM"]


def test_when_the_waiting_process_goes_the_attached_one_goes_too(program: Path) -> None:
    attached, read = attach(program)
    assert output(read, "ready\n") == "ready\n"
    assert alive(attached.pid)
    attached._connection.close()  # noqa: SLF001 - as the step program's end closes it
    assert still_there(lambda: [str(attached.pid)] if alive(attached.pid) else [], settle_s=10) == []
    os.close(read)

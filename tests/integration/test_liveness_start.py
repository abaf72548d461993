"""A launcher's sign of life while it starts, with real processes: an import that holds the
interpreter's lock for longer than the 10 s limit (a cold torch on a slow file system) is a
slow start, not a frozen one; a launcher stopped while it starts is frozen within 10 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchx_ext import liveness
from torchx_ext.liveness import FileWatch

# What the launcher does at its start, with a C call that holds the interpreter's lock as a long
# import does (the touching thread cannot run meanwhile).
STARTING_LAUNCHER = """
import ctypes, sys, time
from torchx_ext.launcher.liveness import mark_running, start_touching
start_touching(sys.argv[1])
print("importing", flush=True)
ctypes.PyDLL(None).sleep(int(sys.argv[2]))
mark_running(sys.argv[1])
print("running", flush=True)
time.sleep(60)
"""


def start(path: Path, import_s: int) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", STARTING_LAUNCHER, str(path), str(import_s)],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout is not None and process.stdout.readline() == "importing\n"
    return process


def children_of(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def test_an_import_longer_than_the_limit_is_a_slow_start_not_a_frozen_one(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    launcher = start(path, import_s=14)
    try:
        watch, judged = FileWatch(str(path)), []
        deadline = time.monotonic() + 14
        while time.monotonic() < deadline:
            judged.append(watch.frozen_for())
            time.sleep(0.5)
        assert launcher.stdout is not None and launcher.stdout.readline() == "running\n"
        assert judged and all(verdict is None for verdict in judged), judged
        assert liveness.main([str(path), "10"]) == 0
        assert children_of(launcher.pid) == []  # the starting beat is gone once it runs
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


@pytest.mark.parametrize("whole_replica", [True, False], ids=["every process stopped", "only the launcher stopped"])
def test_a_launcher_stopped_while_it_starts_is_frozen_within_the_usual_limit(tmp_path: Path, whole_replica: bool) -> None:
    path = tmp_path / "alive"
    launcher = start(path, import_s=60)
    try:
        if whole_replica:
            os.killpg(launcher.pid, signal.SIGSTOP)  # a frozen host: every process of the replica
        else:
            os.kill(launcher.pid, signal.SIGSTOP)  # its beating process runs on, and sees it stopped
        stopped = time.monotonic()
        watch = FileWatch(str(path))
        while watch.frozen_for() is None and time.monotonic() - stopped < 30:
            time.sleep(0.2)
        assert time.monotonic() - stopped < liveness.DEFAULT_MAX_AGE_S + 3
        assert liveness.main([str(path), "10"]) == 1
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()

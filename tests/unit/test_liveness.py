"""The liveness file: how its judges read it, on a clock of the test's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchx_ext import liveness
from torchx_ext.launcher.liveness import mark_running, write_state
from torchx_ext.liveness import FileWatch, max_age_s, runs_our_launcher


def test_a_file_that_keeps_changing_is_never_silent(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    watch = FileWatch(str(path))
    assert watch.silent_s(now=0) is None  # no file yet: nothing to judge
    mark_running(str(path))
    for second in range(1, 30):
        os.utime(path, ns=(second * 10**9, second * 10**9))
        assert watch.silent_s(now=second) == 0
        assert watch.frozen_for(now=second) is None


def test_a_file_that_stops_changing_is_frozen_after_ten_seconds_of_the_judges_clock(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    mark_running(str(path))
    os.utime(path, ns=(0, 0))  # a clock far off (a shared file system's) does not matter
    watch = FileWatch(str(path))
    assert watch.silent_s(now=100) == 0
    assert watch.frozen_for(now=110) is None
    assert watch.frozen_for(now=110.5) == 10.5


def test_a_starting_launcher_may_be_silent_for_a_minute_unless_its_start_is_watched(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    path.write_bytes(liveness.STARTING)
    assert max_age_s(str(path)) == liveness.STARTING_MAX_AGE_S
    path.write_bytes(liveness.WATCHED)  # a process of its own beats while it imports
    assert max_age_s(str(path)) == liveness.DEFAULT_MAX_AGE_S
    mark_running(str(path))
    assert max_age_s(str(path)) == liveness.DEFAULT_MAX_AGE_S


def test_before_its_file_exists_a_launcher_is_silent_only_while_it_is_stopped(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch, other = FileWatch(str(path), pid=process.pid), FileWatch(str(path))
        start = time.monotonic()
        assert watch.frozen_for(now=start + 100) is None  # running, however slowly: not frozen
        os.kill(process.pid, signal.SIGSTOP)
        while watch.silent_s(now=start) is None and time.monotonic() - start < 5:
            time.sleep(0.05)  # the kernel marks it stopped
        assert watch.frozen_for(now=start + liveness.DEFAULT_MAX_AGE_S) is None
        assert watch.frozen_for(now=start + liveness.DEFAULT_MAX_AGE_S + 0.5) == liveness.DEFAULT_MAX_AGE_S + 0.5
        assert other.frozen_for(now=start + 1000) is None  # no process given: nothing to judge
        assert liveness.main([str(path), "10"]) == 0  # a probe's first process is not this one
    finally:
        process.kill()
        process.wait()


def test_the_probe_says_why_a_replica_is_frozen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "alive"
    assert liveness.main([str(path), "10"]) == 0  # not written yet, and pid 1 runs: starting
    mark_running(str(path))
    assert liveness.main([str(path), "10"]) == 0
    os.utime(path, (0, 0))
    assert liveness.main([str(path), "10"]) == 1
    assert "(more than 10 s): frozen" in capsys.readouterr().err


@pytest.mark.parametrize(
    "entrypoint, args, probed",
    [("python", ["-m", "torchx_ext.launcher", "--nnodes", "2"], True),
     ("/usr/bin/python3.11", ["-m", "torchx_ext.launcher"], True),
     ("uv", ["run", "python", "-m", "torchx_ext.launcher"], False),
     ("python", ["train.py", "-m", "torchx_ext.launcher"], False),
     ("echo", ["hello"], False)],
)
def test_only_our_launcher_under_a_plain_python_gets_a_probe(entrypoint: str, args: list[str], probed: bool) -> None:
    assert runs_our_launcher(entrypoint, args) is probed


def test_the_training_probe_fails_only_while_the_launcher_waits_as_a_spare(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "alive"
    assert liveness.main(["--training", str(path)]) == 0  # not written yet: starting, no spare
    write_state(str(path), liveness.RUNNING)
    assert liveness.main(["--training", str(path)]) == 0
    assert liveness.main([str(path), "10"]) == 0 and capsys.readouterr().out == ""

    write_state(str(path), liveness.SPARE)

    assert liveness.main(["--training", str(path)]) == 1
    assert liveness.main([str(path), "10"]) == 0 and capsys.readouterr().out == "spare\n"  # Docker's health log shows it

"""Preloaded workers (the default) behave like `python script.py` workers, only sooner."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.launcher_helpers import JOBS, clean_env, run_launcher

LIFECYCLE = str(JOBS / "lifecycle.py")


@pytest.mark.parametrize("start", ["preloaded", "fresh"])
def test_a_script_sees_python_script_semantics_and_its_exit_work_is_done(start: str, tmp_path: Path) -> None:
    result = run_launcher(
        ["--nproc-per-node", "2", "--worker-start", start, LIFECYCLE, str(tmp_path), "a b", "$x", "--flag"]
    )

    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"start{rank}.json").read_text())
        assert seen["argv"] == [str(tmp_path), "a b", "$x", "--flag"]
        assert seen["name"] == "__main__" and seen["file"] == LIFECYCLE and seen["main_is_this_module"]
        assert seen["path0"] == str(JOBS)
        assert seen["torch_was_loaded"] == (start == "preloaded")
        assert (tmp_path / f"atexit{rank}.txt").read_text() == "atexit ran"
        assert (tmp_path / f"unclosed{rank}.txt").read_text() == "buffered, never flushed by the script\n"


@pytest.mark.parametrize("start", ["preloaded", "fresh"])
def test_a_workers_exit_code_is_reported_with_its_rank(start: str, tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    result = run_launcher(
        ["--nproc-per-node", "1", "--worker-start", start, LIFECYCLE, str(tmp_path)],
        env=clean_env(LIFECYCLE_EXIT="7", TORCHELASTIC_ERROR_FILE=str(error_file)),
    )

    assert result.returncode == 1
    assert "exitcode  : 7" in result.stderr, result.stderr
    assert json.loads(error_file.read_text())["message"]["message"] == "rank 0 (local rank 0) exited with code 7"
    assert (tmp_path / "atexit0.txt").read_text() == "atexit ran"


def test_a_preloaded_worker_can_start_a_forkserver_of_its_own(tmp_path: Path) -> None:
    # The workers' server is a fork of the launcher: nothing of the launcher's record of it (a
    # lock held at the fork) may stop a worker from starting its own.
    result = run_launcher(["--nproc-per-node", "2", str(JOBS / "own_forkserver.py"), str(tmp_path)], timeout=120)

    assert result.returncode == 0, result.stderr
    assert [(tmp_path / f"own{rank}.txt").read_text() for rank in (0, 1)] == ["4", "9"]


def test_an_unknown_worker_start_is_refused_with_the_valid_ones(tmp_path: Path) -> None:
    result = run_launcher(["--worker-start", "warm", LIFECYCLE, str(tmp_path)])

    assert result.returncode == 2
    assert "invalid choice: 'warm' (choose from 'preloaded', 'fresh')" in result.stderr


@pytest.mark.skipif(os.environ.get("CI") != "true" and (os.geteuid() != 0 or shutil.which("unshare") is None),
                    reason="a PID namespace needs root and unshare (CI has both)")
def test_a_launcher_that_is_its_containers_first_process_still_forks_its_workers_preloaded(tmp_path: Path) -> None:
    # In a container the launcher is PID 1: its early forkserver must not take that for its parent's death.
    from tests.integration.launcher_helpers import LAUNCHER

    result = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", *LAUNCHER, "--nproc-per-node", "1",
         str(JOBS / "parent_of_worker.py")], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    parent = next(line for line in result.stdout.splitlines() if "parent: " in line)
    assert "torchx_ext.launcher" in parent and "multiprocessing.forkserver" not in parent, parent

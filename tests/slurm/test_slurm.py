"""slurm on the real two-node test cluster (scripts/slurm_cluster.sh), beyond the conformance
suite: where replicas run, elastic jobs on what is free, limits, bad -cfg, the CLI from another
directory, and tracking once the controller forgot a job with accounting off."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState

from tests.conformance.jobs_api import status_until, wait, wait_for_line
from tests.fixtures.slurm_cluster import slurm_leftovers
from tests.helpers import torchx
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.slurm.records import STATE_ROOT_ENV

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"
JOBS = REPO / "tests" / "conformance" / "jobs"


@pytest.fixture
def cfg(slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
    yield {"job_dir": str(tmp_path / "jobs")}
    subprocess.run(["scancel", "--user=root", "--name=sleeper"], capture_output=True)


def queued() -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()


def test_2x2_runs_one_replica_per_node_and_the_cli_finds_it_from_any_directory(
    runner: Runner, cfg: dict[str, str], tmp_path: Path
) -> None:
    handle = runner.run(ddp("--steps", "3", script=str(TRAIN), j="2x2", cpu=1), "slurm", cfg=cfg)

    assert wait(runner, handle) == AppState.SUCCEEDED
    status = runner.status(handle)
    assert status is not None
    assert sorted(replica.hostname for role in status.roles for replica in role.replicas) == ["node1", "node2"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    logged = torchx("log", f"{handle}/train/0", cwd=elsewhere)
    assert logged.returncode == 0, logged.stderr
    assert "4 ranks finished 3 steps" in logged.stdout
    stdout_only = torchx("log", "--streams", "stdout", f"{handle}/train/1", cwd=elsewhere)
    assert "rendezvous at" not in stdout_only.stdout and "rank 3/4" in stdout_only.stdout
    shown = torchx("status", handle, cwd=elsewhere)
    assert "SUCCEEDED" in shown.stdout, shown.stderr


def test_run_wait_says_why_a_job_waits_and_where_it_started_then_status_shows_its_end(
    cfg: dict[str, str], tmp_path: Path
) -> None:
    # A job of another user's kind holds both nodes for a while: ours waits in the queue.
    subprocess.run(["sbatch", "--job-name=sleeper", "--nodes=2", "--exclusive", f"--output={tmp_path}/sleeper.out",
                    "--wrap", "sleep 8"], check=True, capture_output=True, cwd=tmp_path)
    ran = torchx("run", "-s", "slurm", "-cfg", f"job_dir={cfg['job_dir']}", "--wait", "dist.ddp", "-j", "1x1",
                 "--script", str(TRAIN), "--", "--steps", "2", cwd=tmp_path, timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    said = [line for line in ran.stderr.splitlines() if line.startswith("torchx: ")]
    pending = [index for index, line in enumerate(said)
               if re.fullmatch(r"torchx: pending \(\w+\), [\d.]+ s since submission", line)]
    running = [index for index, line in enumerate(said) if re.fullmatch(r"torchx: running train/0 on node[12] \(.*\)", line)]
    assert pending and running and pending[0] < running[0], ran.stderr
    handle = next(line for line in ran.stdout.splitlines() if line.startswith("slurm://"))
    assert "SUCCEEDED" in torchx("status", handle, cwd=tmp_path).stdout


def test_dryrun_prints_the_batch_script_and_queues_nothing(slurm_cluster: str, tmp_path: Path) -> None:
    before = queued()
    ran = torchx("run", "-s", "slurm", "-cfg", f"job_dir={tmp_path},partition=debug", "--dryrun", "dist.ddp",
                 "-j", "2x1", "--script", str(TRAIN))

    assert ran.returncode == 0, ran.stderr
    assert "#SBATCH --nodes=2" in ran.stdout and "#SBATCH --partition=debug" in ran.stdout
    assert "srun --nodes=${SLURM_JOB_NUM_NODES}" in ran.stdout
    assert set(queued()) <= set(before) and not list(tmp_path.iterdir())


def test_torchx_spelt_comment_and_mail_options_reach_the_job_byte_for_byte(runner: Runner, cfg: dict[str, str]) -> None:
    comment = 'nightly "ddp" run #1 \\ it\'s $HOME'
    handle = runner.run(ddp(script=str(JOBS / "sleeper.py"), j="1x1", cpu=1), "slurm",
                        cfg={**cfg, "comment": comment, "mail-user": "me@example.com", "mail-type": "END,FAIL"})
    job_id = handle.rpartition("/")[2]

    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    runner.cancel(handle)
    shown_comment = re.search(r"^\s*Comment=(.*)$", shown, re.MULTILINE)
    assert shown_comment is not None and shown_comment[1].rstrip(" ") == comment, shown  # scontrol adds a blank
    assert "MailUser=me@example.com MailType=END,FAIL" in shown, shown


def test_an_elastic_job_runs_on_the_one_node_that_is_free(runner: Runner, cfg: dict[str, str]) -> None:
    subprocess.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=torchx_ext test"], check=True)
    try:
        handle = runner.run(ddp("--steps", "2", script=str(TRAIN), j="1:2x1", cpu=1), "slurm", cfg=cfg)
        assert wait(runner, handle) == AppState.SUCCEEDED
    finally:
        subprocess.run(["scontrol", "update", "nodename=node2", "state=resume"], check=True)
    assert any("1 ranks finished 2 steps" in line for line in runner.log_lines(handle, "train", 0))


def test_a_job_over_its_time_limit_is_failed_saying_so(runner: Runner, cfg: dict[str, str]) -> None:
    handle = runner.run(ddp(script=str(JOBS / "sleeper.py"), j="1x1", cpu=1), "slurm", cfg={**cfg, "time": "1"})

    assert wait(runner, handle, timeout_s=180) == AppState.FAILED
    status = runner.status(handle)
    assert status is not None and "time limit" in status.msg, status.msg
    assert not slurm_leftovers(handle.rpartition("/")[2])


def test_status_of_a_cancelled_job_is_cancelled_through_the_cli(runner: Runner, cfg: dict[str, str]) -> None:
    handle = runner.run(ddp(script=str(JOBS / "sleeper.py"), j="2x1", cpu=1), "slurm", cfg=cfg)
    wait_for_line(runner, handle, "sleeper", 1, r"running rank 1")

    cancelled = torchx("cancel", handle)
    assert cancelled.returncode == 0, cancelled.stderr
    assert wait(runner, handle, timeout_s=30) == AppState.CANCELLED
    shown = torchx("status", handle)
    assert shown.returncode == 0 and "CANCELLED" in shown.stdout, shown.stdout + shown.stderr
    listed = torchx("list", "-s", "slurm")
    assert handle.rpartition("/")[2] in listed.stdout and "CANCELLED" in listed.stdout


@pytest.mark.parametrize("bad, named", [
    ({"partition": "nosuch"}, "nosuch"),
    ({"nodelist": "node9"}, "node"),
    ({"time": "abc"}, "invalid time 'abc'"),
])
def test_bad_cfg_is_one_line_and_queues_nothing(
    runner: Runner, cfg: dict[str, str], bad: dict[str, str], named: str
) -> None:
    before = queued()
    with pytest.raises(InvalidArgumentError) as raised:
        runner.run(ddp(script=str(TRAIN), j="1x1", cpu=1), "slurm", cfg={**cfg, **bad})

    assert named in str(raised.value) and "\n" not in str(raised.value)
    # An earlier test's cancelled job may still be leaving the queue: only a new id is a job queued here.
    assert set(queued()) <= set(before)
    assert not list(Path(cfg["job_dir"]).glob("*")) if Path(cfg["job_dir"]).exists() else True


def test_bad_cfg_through_the_cli_is_one_line_without_a_traceback(slurm_cluster: str, tmp_path: Path) -> None:
    ran = torchx("run", "-s", "slurm", "-cfg", f"job_dir={tmp_path},partition=nosuch", "dist.ddp", "-j", "1x1",
                 "--script", str(TRAIN), cwd=tmp_path)
    assert ran.returncode != 0
    assert "Traceback" not in ran.stderr and "nosuch" in ran.stderr, ran.stderr


def test_without_accounting_a_job_the_controller_forgot_ends_as_its_replicas_did(
    slurm_without_accounting: str, runner: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
    cfg = {"job_dir": str(tmp_path / "jobs")}
    good = runner.run(ddp(script=str(JOBS / "echo.py"), j="2x1", cpu=1), "slurm", cfg=cfg)
    bad = runner.run(ddp("1", "3", script=str(JOBS / "exit_code.py"), j="2x1", cpu=1), "slurm", cfg=cfg)
    ids = [handle.rpartition("/")[2] for handle in (good, bad)]
    # Nobody looks until the controller has forgotten both (MinJobAge=5 s without accounting).
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        shown = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i", "-j", ",".join(ids)],
                               capture_output=True, text=True)
        if not set(ids) & set(shown.stdout.split()):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"the controller still holds {ids}")

    assert status_until(runner, good, lambda status: status.is_terminal()).state == AppState.SUCCEEDED
    failed = status_until(runner, bad, lambda status: status.is_terminal())
    assert failed.state == AppState.FAILED and "exit_code/1" in failed.msg, failed.msg
    assert runner.status("slurm://torchx/999999") is None

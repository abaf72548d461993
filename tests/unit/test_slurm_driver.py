"""slurm's driver, which batch.sh execs: its decisions as a table (driver_core.py), and the driver
itself running a job's steps through an ``srun`` that stands in for Slurm's (the boundary: it
records its argv and ends as told), without a cluster. Batch scripts of before the driver (format
2 requests, their own bash retry loop) still run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchx import specs

from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.slurm.driver_core import (
    DONE, GIVE_UP, RERUN, after_app_attempt, after_step, exit_code, first_failed, job_status, whole_app_restarts,
)
from torchx_ext.schedulers.slurm.records import SlurmJobDir
from torchx_ext.schedulers.slurm.build import build_request

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


@pytest.mark.parametrize("code, attempt, reruns, enough, cancelled, decided", [
    (0, 0, 0, False, False, DONE),  # it succeeded
    (1, 0, 2, False, False, RERUN),  # a failure with reruns left
    (1, 1, 2, False, False, RERUN),
    (1, 2, 2, False, False, GIVE_UP),  # none left: the step's code is the role's
    (1, 0, 0, False, False, GIVE_UP),  # restarts in place (REPLICA): the step itself runs once
    (1, 0, 2, True, False, DONE),  # a short role: enough of its replicas ended with 0
    (137, 0, 2, False, True, GIVE_UP),  # cancelled while in an allocation: no rerun
    (0, 5, 2, False, True, DONE),
])
def test_what_follows_a_roles_step(code: int, attempt: int, reruns: int, enough: bool, cancelled: bool,
                                   decided: str) -> None:
    assert after_step(code, attempt=attempt, reruns=reruns, enough_succeeded=enough, cancelled=cancelled) == decided


@pytest.mark.parametrize("codes, enough, failed", [
    ([None, None], [False, False], None),  # both running
    ([0, None], [False, False], None),  # one done, one running
    ([None, 1], [False, False], 1),
    ([1, 2], [False, False], 0),  # the first role in order
    ([1, None], [True, False], None),  # a short role that ended with enough replicas done failed nothing
])
def test_which_role_failed_an_app_restarted_as_a_whole(codes: list[int | None], enough: list[bool],
                                                       failed: int | None) -> None:
    assert first_failed(codes, enough) == failed


def test_an_app_restarts_as_a_whole_within_the_least_retries_of_its_fixed_application_roles() -> None:
    app, fixed = RolePolicy("APPLICATION", 3, 2, 2), RolePolicy("APPLICATION", 1, 1, 1)
    elastic, replica = RolePolicy("APPLICATION", 0, 3, 1), RolePolicy("REPLICA", 5, 2, 2)
    assert whole_app_restarts([app, fixed]) == 1
    assert whole_app_restarts([app, elastic]) == 3  # an elastic role carries on short: not counted
    assert whole_app_restarts([app]) is None  # one role: its own step runs again
    assert whole_app_restarts([replica, replica]) is None  # each restarts in place
    assert whole_app_restarts([RolePolicy("APPLICATION", 0, 2, 2)] * 2) is None  # no retries
    assert [after_app_attempt(attempt, 1, cancelled) for attempt, cancelled in
            ((0, False), (1, False), (0, True))] == [RERUN, GIVE_UP, GIVE_UP]


def test_the_jobs_code_is_the_last_failed_roles_and_a_signal_reads_as_a_shell_gives_it() -> None:
    assert (job_status([0, 0]), job_status([3, 0]), job_status([3, 1]), job_status([])) == (0, 3, 1, 0)
    assert (exit_code(0), exit_code(2), exit_code(-signal.SIGKILL), exit_code(-signal.SIGTERM)) == (0, 2, 137, 143)


FAKE_SRUN = """#!{python}
# Stands in for Slurm's srun: records its argv, then ends with the next code its role was given
# ("hang": waits for SIGTERM, as a step does, and ends 143; "CODE@ROLE": CODE once ROLE's step hangs).
import json, os, signal, sys, time
directory = os.environ["FAKE_SRUN_DIR"]
role = sys.argv[-1]
with open(os.path.join(directory, "calls"), "a") as calls:
    calls.write(json.dumps(sys.argv[1:]) + "\\n")
path = os.path.join(directory, role + ".codes")
codes = open(path).read().split() if os.path.exists(path) else []
code, rest = (codes[0], codes[1:]) if codes else ("0", [])
open(path, "w").write(" ".join(rest))
if "@" in code:  # "CODE@ROLE": ends with CODE once ROLE's step hangs (a step killed before it read its
    # code would leave it to the next attempt's)
    code, other = code.split("@")
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(directory, other + ".hanging")) and time.monotonic() < deadline:
        time.sleep(0.05)
if code == "hang":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    open(os.path.join(directory, role + ".hanging"), "w").close()
    while True:
        time.sleep(0.1)
sys.exit(int(code))
"""


class FakeSlurm:
    """A job directory with its request, and an srun on PATH that ends each role's steps as told."""

    def __init__(self, tmp_path: Path, app: specs.AppDef) -> None:
        self.job = SlurmJobDir(tmp_path / "job")
        self.job.path.mkdir(parents=True)
        self.bin = tmp_path / "bin"
        self.bin.mkdir(exist_ok=True)
        srun = self.bin / "srun"
        srun.write_text(FAKE_SRUN.format(python=sys.executable))
        srun.chmod(0o755)
        self.request = build_request(app, job_dir=str(self.job.path), cwd=str(tmp_path), interpreter=sys.executable,
                                     options=[])
        self.job.request.write_text(self.request.to_json())
        self.job.script.write_text(self.request.script)

    def codes(self, role: str, *codes: str) -> None:
        (self.bin / f"{role}.codes").write_text(" ".join(codes))

    def env(self, **more: str) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "FAKE_SRUN_DIR": str(self.bin),
                "SLURM_JOB_NUM_NODES": "2", "SLURM_CPUS_ON_NODE": "8", "SLURM_JOB_NUM_NODES_HET_GROUP_0": "2",
                "SLURM_JOB_NUM_NODES_HET_GROUP_1": "1", **more}

    def run(self, **env: str) -> subprocess.CompletedProcess[str]:
        """The batch script, as sbatch's job runs it."""
        return subprocess.run(["bash", str(self.job.script)], env=self.env(**env), capture_output=True, text=True,
                              timeout=60)

    def calls(self) -> list[list[str]]:
        path = self.bin / "calls"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _retried(max_retries: int, policy: specs.RetryPolicy = specs.RetryPolicy.APPLICATION) -> specs.AppDef:
    app = ddp(script="train.py", j="2x1", max_retries=max_retries)
    app.roles[0].retry_policy = policy
    return app


def test_a_failed_step_runs_again_within_max_retries_and_its_restarts_are_kept(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, _retried(2))
    slurm.codes("train", "1", "1", "0")

    done = slurm.run()
    assert done.returncode == 0, done.stderr
    assert len(slurm.calls()) == 3 and slurm.job.read_restarts("train") == 2
    argv = slurm.calls()[0]
    assert argv[:4] == ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=2"]
    assert argv[-5:] == [sys.executable, "-m", "torchx_ext.schedulers.slurm.step", str(slurm.job.path), "train"]


def test_a_step_that_keeps_failing_gives_the_job_its_code_once_the_retries_are_spent(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path / "application", _retried(1))
    slurm.codes("train", "3", "3", "0")

    assert slurm.run().returncode == 3 and len(slurm.calls()) == 2
    # REPLICA: the step program restarts in place; the step itself runs once.
    in_place = FakeSlurm(tmp_path / "in-place", _retried(2, specs.RetryPolicy.REPLICA))
    in_place.codes("train", "1", "0")
    assert in_place.run().returncode == 1 and len(in_place.calls()) == 1


def test_a_requeued_run_is_a_restart_and_one_over_max_retries_does_not_run(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, _retried(1))
    assert slurm.run(SLURM_RESTART_COUNT="1").returncode == 0 and slurm.job.read_restarts("train") == 1
    over = slurm.run(SLURM_RESTART_COUNT="2")
    assert over.returncode == 1 and "over its max_retries (1); not running it again" in over.stderr
    assert len(slurm.calls()) == 1


def test_an_app_restarted_as_a_whole_stops_every_step_when_one_fails_and_starts_them_together(tmp_path: Path) -> None:
    app = specs.AppDef("two", roles=[
        specs.Role("trainer", "img", entrypoint="python", num_replicas=2, max_retries=1,
                   retry_policy=specs.RetryPolicy.APPLICATION),
        specs.Role("reader", "img", entrypoint="python", num_replicas=1, max_retries=1,
                   retry_policy=specs.RetryPolicy.APPLICATION)])
    slurm = FakeSlurm(tmp_path, app)
    slurm.codes("trainer", "hang", "0")
    slurm.codes("reader", "7@trainer", "0")  # a trainer stopped before it took its code would hang next time

    done = slurm.run()
    assert done.returncode == 0, done.stderr
    calls = slurm.calls()
    assert len(calls) == 4 and all(sorted(call[-1] for call in calls[i:i + 2]) == ["reader", "trainer"] for i in (0, 2))
    reader = next(call for call in calls if call[-1] == "reader")
    assert "--het-group=1" in reader and "--nodes=1" in reader
    assert slurm.job.read_restarts("reader") == 1 and slurm.job.read_restarts("trainer") == 0


def test_a_driver_told_to_stop_stops_its_steps_and_ends_143(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, _retried(3))
    slurm.codes("train", "hang", "0")
    driver = subprocess.Popen(["bash", str(slurm.job.script)], env=slurm.env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (slurm.bin / "train.hanging").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    driver.send_signal(signal.SIGTERM)  # scancel's: the driver is the batch script (exec)
    driver.send_signal(signal.SIGTERM)  # said twice: still one clean end

    assert driver.wait(timeout=30) == 143
    assert len(slurm.calls()) == 1  # not started again


def test_a_batch_script_of_before_the_driver_still_runs_its_own_loop(tmp_path: Path) -> None:
    # A format 2 job, queued (or requeued) across the upgrade: its bash loop calls the step
    # program's subcommands, which read its request.
    job = SlurmJobDir(tmp_path / "t-1")
    job.path.mkdir()
    fixture = (RECORDS / "slurm_request_format_2.json").read_text().replace("/tmp/jobs/t-1", str(job.path))
    job.request.write_text(fixture)
    script = (RECORDS / "slurm_batch_format_2.sh").read_text().replace("/tmp/jobs/t-1", str(job.path))
    job.script.write_text(script.replace("/venv/bin/python", sys.executable))
    slurm = FakeSlurm(tmp_path, _retried(0))  # its srun only
    slurm.codes("train", "0")

    done = subprocess.run(["bash", str(job.script)], env=slurm.env(SLURM_RESTART_COUNT="1"), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert job.read_restarts("train") == 1 and len(slurm.calls()) == 1


def test_a_step_that_cannot_start_fails_the_job_in_one_line(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, _retried(1))
    (slurm.bin / "srun").unlink()  # no Slurm on this host
    env = slurm.env()
    env["PATH"] = str(slurm.bin)
    done = subprocess.run([sys.executable, "-m", "torchx_ext.schedulers.slurm.driver", str(slurm.job.path)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "slurm driver: [Errno 2] No such file or directory: 'srun'" in done.stderr

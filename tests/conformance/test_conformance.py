"""What every scheduler adapter must do, checked the same way for each (see conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppDef, AppState, parse_app_handle

from tests.conformance.cases import EVERY_BACKEND, supporting
from tests.conformance.conftest import JOBS, SchedulerUnderTest
from tests.conformance.test_faults import _history, _training, _wait_for_step
from tests.helpers import TORCHX
from tests.conformance.jobs_api import status_until, wait, wait_for_line
from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.backends import CANCEL_GRACE, ELASTIC

LINES_PER_RANK = 100_000
TRAIN = Path(__file__).parents[2] / "examples" / "train.py"


def submit(runner: Runner, scheduler: SchedulerUnderTest, app: AppDef) -> str:
    handle: str = runner.run(app, scheduler.name, cfg=scheduler.cfg)
    return handle


def app_id(handle: str) -> str:
    parsed: str = parse_app_handle(handle).app_id
    return parsed


def test_2x2_job_succeeds_and_its_logs_hold_every_line_once(runner: Runner, scheduler: SchedulerUnderTest) -> None:
    app = ddp(str(LINES_PER_RANK), script=str(JOBS / "lines.py"), j="2x2", **scheduler.component_args)
    handle = submit(runner, scheduler, app)

    assert wait(runner, handle) == AppState.SUCCEEDED, runner.status(handle)
    seen: Counter[tuple[int, int]] = Counter()
    for replica in (0, 1):
        for line in runner.log_lines(handle, "lines", replica):
            match = re.search(r"rank (\d+) line (\d+)$", line.rstrip("\n"))
            if match:
                seen[(int(match[1]), int(match[2]))] += 1
    for rank in range(4):
        lines = [index for (owner, index), _ in seen.items() if owner == rank]
        assert sorted(lines) == list(range(LINES_PER_RANK)), f"rank {rank}: {len(lines)} distinct lines"
    duplicated = {key: count for key, count in seen.items() if count > 1}
    assert not duplicated, f"{len(duplicated)} lines appear more than once, e.g. {next(iter(duplicated))}"


def test_2x2_gloo_training_through_the_torchx_cli_succeeds(runner: Runner, scheduler: SchedulerUnderTest) -> None:
    # As a user types it: ranks on two replicas meet at replica 0's host (a process's own
    # host, a container's or a pod's DNS name) and all-reduce with gloo.
    cfg = ",".join(f"{key}={value}" for key, value in scheduler.cfg.items())
    options = [f"--{key}={','.join(value) if isinstance(value, list) else value}"
               for key, value in scheduler.component_args.items()]
    # No workspace: local_docker would build the checkout (and its environments) into an image.
    command = [*TORCHX, "run", "-s", scheduler.name, "-cfg", cfg, "--workspace", "", "--wait",
               "dist.ddp", "-j", "2x2", *options, "--script", str(TRAIN), "--", "--steps", "5"]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=300)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    handle = next(line for line in ran.stdout.splitlines() if line.startswith(f"{scheduler.name}://"))
    status = runner.status(handle)
    assert status is not None and status.state == AppState.SUCCEEDED
    lines = [line for line in runner.log_lines(handle, "train", 0) if "train.py: 4 ranks finished 5 steps" in line]
    assert len(lines) == 1 and "all-reduce of ranks 1..4 = 10 (expected 10), weights in sync" in lines[0], lines
    # While it waited it said where the replicas run, one plain line per change (into a pipe).
    said = [line for line in ran.stderr.splitlines() if line.startswith("torchx: running ")]
    assert any(re.search(r"train/0 on \S", line) for line in said), ran.stderr
    assert any(re.search(r"train/1 on \S", line) for line in said), ran.stderr
    assert "\r" not in ran.stderr


def test_a_rank_that_exits_7_fails_the_job_within_30_s_naming_replica_and_code(
    runner: Runner, scheduler: SchedulerUnderTest
) -> None:
    app = ddp("3", "7", script=str(JOBS / "exit_code.py"), j="2x2", **scheduler.component_args)
    handle = submit(runner, scheduler, app)

    assert wait(runner, handle) == AppState.FAILED
    ended = time.time()
    exited = [
        float(match[1])
        for line in runner.log_lines(handle, "exit_code", 1)
        if (match := re.search(r"exiting at ([\d.]+)", line))
    ]
    assert exited, "rank 3 never reported its exit"
    assert ended - exited[0] < 30
    description = runner.describe(handle)
    status = runner.status(handle)
    assert description is not None and status is not None
    assert "exit_code/1" in status.msg and "7" in status.msg, status.msg
    failed = [replica for role in status.roles for replica in role.replicas if replica.state == AppState.FAILED]
    assert [replica.id for replica in failed] == [1]
    # What `torchx run` and `torchx status` print for it (torchx parses the error reports).
    assert "rank 3 (local rank 1) exited with code 7" in repr(status)
    assert "rank 3 (local rank 1) exited with code 7" in status.format()
    assert not scheduler.leftovers(app_id(handle))


def test_cancel_of_a_running_job_is_cancelled_and_leaves_nothing_running(
    runner: Runner, scheduler: SchedulerUnderTest
) -> None:
    app = ddp(script=str(JOBS / "sleeper.py"), j="2x2", **scheduler.component_args)
    handle = submit(runner, scheduler, app)
    wait_for_line(runner, handle, "sleeper", 1, r"running rank 3")
    assert scheduler.leftovers(app_id(handle), settle_s=0), "the running job should be visible before cancel"

    runner.cancel(handle)

    assert wait(runner, handle, timeout_s=30) == AppState.CANCELLED
    assert scheduler.leftovers(app_id(handle)) == []


@pytest.mark.feature(CANCEL_GRACE)
@pytest.mark.parametrize("scheduler", supporting(CANCEL_GRACE), indirect=True)
def test_a_cancelled_jobs_workers_get_cancel_grace_seconds_to_clean_up_and_no_more(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    # A worker that saves its state on SIGTERM: 8 s of it fit a grace of 12 (more than the launcher's
    # own 5 s), a minute does not fit 2.
    outcomes: dict[int, list[str]] = {}
    for grace, cleanup_s in ((12, "8"), (2, "60")):
        directory = tmp_path / f"grace-{grace}"
        directory.mkdir()
        args = dict(scheduler.component_args)
        args["mounts"] = [*args.get("mounts", []), *scheduler.shared_dir_mounts(directory)]
        app = ddp(str(directory), cleanup_s, script=str(JOBS / "graceful.py"), j="1x1", **args)
        handle: str = runner.run(app, scheduler.name, cfg={**scheduler.cfg, "cancel_grace": grace})
        wait_for_line(runner, handle, "graceful", 0, r"running rank 0")

        runner.cancel(handle)

        assert wait(runner, handle, timeout_s=60) == AppState.CANCELLED
        assert scheduler.leftovers(app_id(handle), settle_s=grace + 15) == []
        outcomes[grace] = sorted(path.name for path in directory.iterdir())
    assert outcomes == {12: ["cleaned.0", "sigterm.0"], 2: ["sigterm.0"]}


def test_describe_of_an_unknown_app_is_none(runner: Runner, scheduler: SchedulerUnderTest) -> None:
    assert runner.describe(f"{scheduler.name}://torchx/no-such-app-0000") is None
    assert runner.status(f"{scheduler.name}://torchx/no-such-app-0000") is None


def test_list_shows_submitted_jobs(runner: Runner, scheduler: SchedulerUnderTest) -> None:
    app = ddp(script=str(JOBS / "echo.py"), j="1x1", **scheduler.component_args)
    handles = [submit(runner, scheduler, app) for _ in range(2)]
    for handle in handles:
        wait(runner, handle)

    listed = {item.app_id: item.state for item in runner.list(scheduler.name)}

    assert {app_id(handle): AppState.SUCCEEDED for handle in handles}.items() <= listed.items()


VALUES = ["plain", "two words", "it's \"quoted\"", "$HOME ${app_id} $$ `id`", "line one\nline two", "--flag=value", ""]


def test_arguments_and_env_values_reach_the_worker_exactly(runner: Runner, scheduler: SchedulerUnderTest) -> None:
    # One job for every awkward value: each one an argument (before and after a "--") and an
    # environment value of its own.
    argv = [*VALUES, "--", *VALUES]
    env = {f"ECHO_VALUE_{position}": value for position, value in enumerate(VALUES)}
    app = ddp(*argv, script=str(JOBS / "echo.py"), j="1x1", env=env, **scheduler.component_args)
    handle = submit(runner, scheduler, app)
    assert wait(runner, handle) == AppState.SUCCEEDED

    lines = [line for line in runner.log_lines(handle, "echo", 0) if "ECHO " in line]

    assert len(lines) == 1, lines
    echoed = json.loads(lines[0].split("ECHO ", 1)[1])
    assert echoed == {"argv": argv, "env": env}


# `torchx stacks`: every running rank's stack, asked of a job that trains on (ranks 0 and 1 of a
# 2x1 job), read from its logs; the job goes on untouched.
@pytest.mark.parametrize("scheduler", EVERY_BACKEND, indirect=True)
def test_torchx_stacks_prints_every_running_ranks_stack_and_the_job_goes_on(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, job_id, directory = _training(runner, scheduler, tmp_path, "2x1", max_retries=0, steps=400, job="hung.py",
                                          job_args=("1", "-1"))
    done = subprocess.run([*TORCHX, "stacks", handle], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    for replica in (0, 1):
        assert f"== hung/{replica} ==" in done.stdout, done.stdout[-3000:]
    blocks = done.stdout.split("== hung/1 ==")
    for block, rank in zip(blocks, (0, 1)):
        assert f"--- rank {rank} (local rank 0, pid" in block and 'hung.py", line' in block, block[-3000:]
        assert "(main thread)" in block

    one = subprocess.run([*TORCHX, "stacks", handle, "hung/1"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and "== hung/1 ==" in one.stdout and "== hung/0 ==" not in one.stdout, one.stderr
    steps = len(_history(directory))
    _wait_for_step(directory, steps + 3)  # nothing was stopped
    assert runner.status(handle).state == AppState.RUNNING

    unknown = subprocess.run([*TORCHX, "stacks", handle, "hung/7"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines()[-1] == (
        f"torchx: error: app {job_id} has no replica hung/7: it has hung/0, hung/1"), unknown.stderr
    runner.cancel(handle)
    assert wait(runner, handle) == AppState.CANCELLED
    assert scheduler.leftovers(job_id) == []


@pytest.mark.feature(ELASTIC)
@pytest.mark.parametrize("scheduler", supporting(ELASTIC), indirect=True)
def test_status_of_a_running_elastic_job_reads_the_same_on_every_scheduler(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    # Each backend fills one job view (common/scheduler.py's JobView) and the shell words it: the
    # same app, running, gives the same status everywhere but for host names and the app id.
    handle, app, _ = _training(runner, scheduler, tmp_path, "1:2x1", max_retries=0, steps=400)
    status = status_until(runner, handle, lambda status: "runs 2 of" in status.msg, timeout_s=90)
    role = status.roles[0].role
    seen = (status.state, status.num_restarts, status.msg,
            [(each.role, [(replica.id, replica.state) for replica in each.replicas]) for each in status.roles])
    assert seen == (AppState.RUNNING, 0, f"role {role} runs 2 of 1..2 replicas",
                    [(role, [(0, AppState.RUNNING), (1, AppState.RUNNING)])]), status
    runner.cancel(handle)
    assert wait(runner, handle, timeout_s=60) == AppState.CANCELLED
    assert not scheduler.leftovers(app)

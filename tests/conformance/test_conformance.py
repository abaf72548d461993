"""What every scheduler adapter must do, checked the same way for each (see conftest.py)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest
from torchx.runner import Runner
from torchx.specs import AppDef, AppState, parse_app_handle

from tests.conformance.conftest import JOBS, SchedulerUnderTest
from tests.conformance.jobs_api import wait, wait_for_line
from torchx_ext.components.dist import ddp

LINES_PER_RANK = 100_000


def submit(runner: Runner, scheduler: SchedulerUnderTest, app: AppDef) -> str:
    handle: str = runner.run(app, scheduler.name, cfg=scheduler.cfg)
    return handle


def app_id(handle: str) -> str:
    parsed: str = parse_app_handle(handle).app_id
    return parsed


def test_2x2_job_succeeds_and_its_logs_hold_every_line_once(runner: Runner, scheduler: SchedulerUnderTest) -> None:
    app = ddp(str(LINES_PER_RANK), script=str(JOBS / "lines.py"), j="2x2", **scheduler.component_args)
    handle = submit(runner, scheduler, app)

    assert wait(runner, handle) == AppState.SUCCEEDED
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
    assert scheduler.leftovers(app_id(handle)), "the running job should be visible before cancel"

    runner.cancel(handle)

    assert wait(runner, handle, timeout_s=30) == AppState.CANCELLED
    assert scheduler.leftovers(app_id(handle)) == []


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


@pytest.mark.parametrize(
    "value",
    ["plain", "two words", "it's \"quoted\"", "$HOME ${app_id} $$ `id`", "line one\nline two", "--flag=value", ""],
)
def test_arguments_and_env_values_reach_the_worker_exactly(
    runner: Runner, scheduler: SchedulerUnderTest, value: str
) -> None:
    app = ddp(value, "--", value, script=str(JOBS / "echo.py"), j="1x1", env={"ECHO_VALUE": value},
              **scheduler.component_args)
    handle = submit(runner, scheduler, app)
    assert wait(runner, handle) == AppState.SUCCEEDED

    lines = [line for line in runner.log_lines(handle, "echo", 0) if "ECHO " in line]

    assert len(lines) == 1, lines
    echoed = json.loads(lines[0].split("ECHO ", 1)[1])
    assert echoed == {"argv": [value, "--", value], "env": {"ECHO_VALUE": value}}

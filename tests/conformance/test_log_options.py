"""torchx's log options on every scheduler, as torchx 0.7.0's own scheduler tests ask them of its
(docker_scheduler_test.py's test_docker_logs and test_docker_logs_streams, local_scheduler_test.py's
test_log_iterator): a stream alone, a regex, a time window, and a tail that ends with the job.
Ours honours ``since`` and ``until`` on every scheduler (torchx's local and Slurm ones ignore them):
docs/torchx-parity.md."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.schedulers.api import Stream
from torchx.specs import AppState

from tests.conformance.cases import EVERY_BACKEND
from tests.conformance.conftest import SchedulerUnderTest
from tests.conformance.jobs_api import wait, wait_for_line
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.backends import LOG_STREAMS, backend_named

STREAMS = Path(__file__).parents[1] / "integration" / "jobs" / "streams.py"


def _ours(lines: list[str]) -> list[str]:
    return [line for line in lines if line.split()[:1] in (["early"], ["late"])]


# JobSet's and Volcano's pods log as the job backend's do: the same reader.
@pytest.mark.feature(LOG_STREAMS)
@pytest.mark.parametrize("scheduler", EVERY_BACKEND, indirect=True)
def test_log_options_select_a_stream_a_time_window_and_a_regex_and_a_tail_ends_with_the_job(
    runner: Runner, scheduler: SchedulerUnderTest
) -> None:
    app = ddp("3", script=str(STREAMS), j="1x1", tee=0, **scheduler.component_args)
    handle: str = runner.run(app, scheduler.name, cfg=scheduler.cfg)
    wait_for_line(runner, handle, "streams", 0, "early err 2", timeout_s=120)
    middle = datetime.datetime.now() + datetime.timedelta(seconds=1)

    followed = _ours(list(runner.log_lines(handle, "streams", 0, should_tail=True)))  # returns when the job ends

    assert wait(runner, handle) == AppState.SUCCEEDED
    for stream in ("out", "err"):
        assert [line for line in followed if f" {stream} " in line] == [
            f"{when} {stream} {index}\n" for when in ("early", "late") for index in range(3)]
    lacking = backend_named(scheduler.name).why_not(LOG_STREAMS)  # type: ignore[union-attr]
    if lacking:  # kubernetes: a pod's log is both streams in one, as torchx's kubernetes scheduler says
        with pytest.raises(InvalidArgumentError, match=re.escape(f"{lacking}; leave streams out")):
            list(runner.log_lines(handle, "streams", 0, streams=Stream.STDOUT))
    else:
        stdout = _ours(list(runner.log_lines(handle, "streams", 0, streams=Stream.STDOUT)))
        stderr = _ours(list(runner.log_lines(handle, "streams", 0, streams=Stream.STDERR)))
        assert stdout == [f"{when} out {index}\n" for when in ("early", "late") for index in range(3)]
        assert stderr == [f"{when} err {index}\n" for when in ("early", "late") for index in range(3)]
    assert _ours(list(runner.log_lines(handle, "streams", 0, regex=r"out [02]$"))) == [
        "early out 0\n", "early out 2\n", "late out 0\n", "late out 2\n"]
    assert {line.split()[0] for line in _ours(list(runner.log_lines(handle, "streams", 0, since=middle)))} == {"late"}
    assert {line.split()[0] for line in _ours(list(runner.log_lines(handle, "streams", 0, until=middle)))} == {"early"}

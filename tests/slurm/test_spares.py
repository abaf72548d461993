"""Hot spares on Slurm (``dist.ddp --spares``): the job holds a node per spare from the start, a
spare takes a frozen replica's place, and the frozen replica's step program kills it and starts it
again in place, where it waits as the next spare. Three nodes are needed (two train, one waits):
the cluster of hosts of the test's own (tests/fixtures/slurm_netns.py), as the partition test has.
The same in an allocation held for the test (``-cfg allocation``), cold and warm.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.conftest import _slurm_freeze
from tests.conformance.jobs_api import status_until, wait, wait_for_line
from tests.conformance.test_faults import _history
from tests.fixtures.slurm_cluster import hold_allocation, job_processes, warm_up
from tests.fixtures.slurm_netns import NODES, netns_job_run
from tests.helpers import still_there
from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.backends import SPARES

CHECKPOINTED = str(Path(__file__).parents[1] / "conformance" / "jobs" / "checkpointed.py")
STEPS = 160


@pytest.mark.feature(SPARES, backend="slurm")
@pytest.mark.parametrize("where", ["a job of its own", "an allocation", "an allocation, warm"])
def test_a_hot_spare_takes_a_frozen_replicas_place_and_the_replica_restarts_in_place_as_the_next_spare(
    runner: Runner, slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    with netns_job_run(tmp_path, monkeypatch) as run:
        directory = run.checkpoints
        app = ddp(str(directory), str(STEPS), "0.25", script=CHECKPOINTED, j="2x1", spares=1, max_retries=1, cpu=1)
        cfg: dict[str, Any] = {"job_dir": str(tmp_path / "jobs")}
        if where.startswith("an allocation"):
            cfg["allocation"] = hold_allocation(len(NODES))
            run.job_ids.append(cfg["allocation"])
        if where.endswith("warm"):
            warm_up(cfg["allocation"], len(NODES), tmp_path / "jobs")
            cfg["warm"] = True
        handle = runner.run(app, "slurm", cfg=cfg)
        job_id = parse_app_handle(handle).app_id
        run.job_ids.append(job_id)
        waiting = status_until(runner, handle, lambda status: "1 hot spare waiting: checkpointed[2]" in status.msg,
                               timeout_s=120)
        assert {replica.hostname for replica in waiting.roles[0].replicas} == set(NODES)  # a node each
        deadline = time.monotonic() + 60
        while len(_history(directory)) < 3:
            assert time.monotonic() < deadline, "no third step"
            time.sleep(0.05)

        _slurm_freeze(job_id, "checkpointed", 1)

        wait_for_line(runner, handle, "checkpointed", 2, r"step \d+ world 2$", timeout_s=60)  # the spare trains
        replaced = status_until(
            runner, handle, lambda status: "1 hot spare waiting: checkpointed[1]" in status.msg, timeout_s=60)
        assert replaced.num_restarts == 1 and "replica checkpointed/1" in replaced.msg, replaced.msg
        assert "gave no sign of life" in replaced.msg, replaced.msg
        # Every step so far done once, at full size; the rest of the job would prove nothing more.
        history = _history(directory)
        assert [entry[0] for entry in history] == list(range(len(history))), history
        assert {world for _, world, _ in history} == {2}, history
        if where.endswith("warm"):
            logs = [log.read_text(errors="replace") for log in (tmp_path / "jobs").glob("*/checkpointed-*.log")]
            assert len(logs) == 3 and all("a fork of this node's warm interpreter" in log and "starts anew" not in log
                                          for log in logs), logs
        runner.cancel(handle)
        assert wait(runner, handle, timeout_s=60) == AppState.CANCELLED
        assert still_there(lambda: job_processes(job_id), 20, 0.5) == []

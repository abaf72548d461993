"""torchft jobs (``dist.hsdp``) on Slurm: the three losses of tests/conformance/test_torchft.py on a
cluster of three hosts of the test's own (tests/fixtures/slurm_netns.py): the lighthouse and each
group are components of one heterogeneous job, which take a node each, and every node has an
address of its own, so the groups meet over the network as on a real cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchx.runner import Runner

from tests.conformance.conftest import _slurm_freeze, _slurm_kill
from tests.conformance.test_torchft import losses_cost_a_step_and_the_group_comes_back, needs_torchft
from tests.fixtures.slurm_cluster import job_processes
from tests.fixtures.slurm_netns import netns_job_run
from tests.helpers import still_there
from torchx_ext.schedulers.backends import TORCHFT


@needs_torchft
@pytest.mark.feature(TORCHFT, backend="slurm")
def test_a_lost_replica_group_costs_the_others_a_step_and_the_lighthouse_comes_back_on_slurm(
    runner: Runner, slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with netns_job_run(tmp_path, monkeypatch) as run:
        directory = run.checkpoints
        _, job_id = losses_cost_a_step_and_the_group_comes_back(
            runner, "slurm", {"job_dir": str(tmp_path / "jobs")}, {"cpu": 1}, directory, _slurm_kill, _slurm_freeze)
        run.job_ids.append(job_id)
        assert still_there(lambda: job_processes(job_id), 20, 0.5) == []

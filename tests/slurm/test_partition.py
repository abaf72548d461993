"""A Slurm node cut off the network mid-training: each node is a host of the test's own (a network
namespace with its own address and a host name that resolves to it, tests/fixtures/slurm_netns.py),
and one node's link is taken down, as a switch or NIC failure looks.

The launchers notice within seconds (their watchdog) and stop their workers; the node cut off
loses the rendezvous store, and its launcher exits, its workers with it. Slurm gives the node up
once it has been silent for ``SlurmdTimeout``, and requeues the job (``--requeue``: it has a
restart left), which starts again on the spare node and resumes from its checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.jobs_api import wait
from tests.conformance.test_faults import _history
from tests.fixtures.slurm_cluster import job_processes
from tests.fixtures.slurm_netns import netns_job_run
from tests.helpers import still_there
from torchx_ext.components.dist import ddp

CHECKPOINTED = str(Path(__file__).parents[1] / "conformance" / "jobs" / "checkpointed.py")
STEPS = 30


def test_a_node_cut_off_the_network_is_given_up_and_the_job_resumes_on_a_spare_node(
    runner: Runner, slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with netns_job_run(tmp_path, monkeypatch) as run:
        cluster, directory = run.cluster, run.checkpoints
        app = ddp(str(directory), str(STEPS), "0.25", script=CHECKPOINTED, j="2x1", max_retries=1, cpu=1)
        role = app.roles[0].name
        handle = runner.run(app, "slurm", cfg={"job_dir": str(tmp_path / "jobs")})
        job_id = parse_app_handle(handle).app_id
        run.job_ids.append(job_id)
        deadline = time.monotonic() + 120
        while len(_history(directory)) < 3:
            assert time.monotonic() < deadline, "no third step"
            time.sleep(0.05)
        status = runner.status(handle)
        assert status is not None
        first_nodes = {replica.id: replica.hostname for replica in status.roles[0].replicas}
        cut = cluster.host(first_nodes[1])
        cluster.net.cut(cut)
        cut_at = time.monotonic()

        # Seconds, not Slurm's SlurmdTimeout: the survivor's launcher names the lost node, and the
        # launcher cut off exits with its workers, though nothing can reach its node.
        lost = f"lost node 1 (replica {role}/1 on host {cut.name}, launcher pid"
        while (lost not in "".join(runner.log_lines(handle, role, 0))
               or "lost the rendezvous store" not in "".join(runner.log_lines(handle, role, 1))):
            assert time.monotonic() - cut_at < 30, "the launchers did not notice the cut in 30 s"
            time.sleep(0.2)
        assert still_there(lambda: job_processes(job_id, cut.name), 15, 0.5) == []

        assert wait(runner, handle, timeout_s=240) == AppState.SUCCEEDED
        history = _history(directory)
        assert [entry[0] for entry in history] == list(range(STEPS)), history
        status = runner.status(handle)
        assert status is not None and status.num_restarts == 1, status
        assert f"Slurm requeued the job (a node failure, a preemption or scontrol requeue): replica {role}/1 " \
               f"({cut.name})" in status.msg, status.msg
        final_nodes = {replica.hostname for replica in status.roles[0].replicas}
        assert cut.name not in final_nodes, final_nodes
        assert cluster.node_states()[cut.name].startswith("down"), cluster.node_states()
        assert still_there(lambda: job_processes(job_id), 20, 0.5) == []

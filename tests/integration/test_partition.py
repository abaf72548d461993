"""A replica cut off the network mid-training, on local_cwd: each replica runs on a host of the
test's own (a network namespace with its own address and a host name that resolves to it,
tests/fixtures/netns.py), and one host's link is taken down, as a switch or NIC failure looks.
No GLOO_SOCKET_IFNAME anywhere: gloo finds each host's address from its name.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.conftest import _local_leftovers
from tests.conformance.jobs_api import wait
from tests.conformance.test_faults import _history, _wait_for_step
from tests.fixtures.netns import hosts, prepare_local_cwd_on_hosts, run_on_hosts
from torchx_ext.components.dist import ddp

CHECKPOINTED = str(Path(__file__).parents[1] / "conformance" / "jobs" / "checkpointed.py")
STEPS = 24


def test_a_replica_cut_off_the_network_is_replaced_and_every_step_is_done_once(
    runner: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = prepare_local_cwd_on_hosts(monkeypatch, tmp_path)
    # Replica 1 gets a second host for its restart: a replacement node.
    with hosts("tp", [1, 2], tmp_path) as net:
        app = ddp(str(directory), str(STEPS), "0.25", script=CHECKPOINTED, j="2x1", max_retries=1)
        role = app.roles[0]
        run_on_hosts(role, net.plan)
        handle = runner.run(app, "local_cwd", cfg={"log_dir": str(tmp_path / "logs")})
        _wait_for_step(directory, 3)
        cut = net.hosts[1]  # replica 1's first host
        net.cut(cut)
        assert wait(runner, handle, timeout_s=180) == AppState.SUCCEEDED
        history = _history(directory)
        assert [entry[0] for entry in history] == list(range(STEPS)), history
        assert history[-1][1] == 2, history
        survivor = "".join(runner.log_lines(handle, role.name, 0))
        assert f"(replica {role.name}/1 on host {cut.name}, launcher pid" in survivor, survivor[-3000:]
        status = runner.status(handle)
        assert status is not None and status.num_restarts == 1, status
        assert f"replica {role.name}/1" in status.msg and "lost the rendezvous store" in status.msg, status.msg
        assert _local_leftovers(parse_app_handle(handle).app_id) == []

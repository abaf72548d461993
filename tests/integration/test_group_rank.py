"""Group ranks of a fixed-size c10d job follow ``--node-rank`` (the replica id our component
passes), not torch's order by host name and pid: replica k runs group rank k, so ``torchx log
.../0`` is rank 0's output. Two launchers on this host, the one started first (the lower pid,
which torch would rank 0) being node rank 1; and two on hosts of the test's own (network
namespaces), the one torch would rank 0 (by host name) being node rank 1, with restarts allowed: the workers' store then
is global rank 0's, which must be found on the host that runs it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.netns import Host, in_host, network, require_netns
from tests.helpers import free_port
from tests.integration.launcher_helpers import LAUNCHER, clean_env

REPORT = str(Path(__file__).parent / "jobs" / "report.py")


def _run_two(tmp_path: Path, node_ranks: tuple[str, str], hosts: tuple[Host, Host] | None = None,
             extra: tuple[str, ...] = ()) -> dict[int, dict[str, Any]]:
    """Start a launcher per node rank, in that order (the first hosts the store), on this host or
    on ``hosts``; the reports of every worker, by global rank."""
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    launchers = []
    for position, node_rank in enumerate(node_ranks):
        env = clean_env(TORCHX_EXT_RDZV_IS_HOST="1" if position == 0 else "0", REPORT_NODE_TAG=f"started-{position}")
        env.pop("GLOO_SOCKET_IFNAME", None)
        endpoint = f"{hosts[0].address if hosts else '127.0.0.1'}:{port}"
        argv = [*LAUNCHER, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                endpoint, "--rdzv-id", "ranks", "--node-rank", node_rank, *extra, REPORT, str(out)]
        launchers.append(subprocess.Popen(in_host(hosts[position], argv) if hosts else argv,
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for launcher in launchers:
        output, _ = launcher.communicate(timeout=120)
        assert launcher.returncode == 0, output[-3000:]
    return {report["rank"]: report for report in (json.loads(path.read_text()) for path in out.glob("rank*.json"))}


@pytest.mark.parametrize("handler", ["arrivals", "torch"])
def test_node_rank_k_runs_group_rank_k_whatever_torch_would_order(handler: str, tmp_path: Path) -> None:
    reports = _run_two(tmp_path, ("1", "0"), extra=("--c10d-handler", handler))

    assert {rank: (report["group_rank"], report["node_tag"]) for rank, report in reports.items()} == {
        0: (0, "started-1"), 1: (1, "started-0")}
    assert all(report["sum"] == 3.0 for report in reports.values())


def test_node_ranks_that_are_not_each_given_once_leave_torchs_order(tmp_path: Path) -> None:
    reports = _run_two(tmp_path, ("0", "0"))  # torchrun's default on every node

    assert sorted(report["group_rank"] for report in reports.values()) == [0, 1]
    assert all(report["sum"] == 3.0 for report in reports.values())


def test_across_hosts_with_restarts_the_workers_store_is_found_on_group_rank_0s_host(tmp_path: Path) -> None:
    # --max-restarts: a fresh workers' store per attempt, served by global rank 0's worker.
    require_netns()
    with network("gr", ["gr-a", "gr-b"]) as net:
        first, second = net.hosts  # torch ranks by host name (its FQDN), then pid: gr-a is its rank 0
        reports = _run_two(tmp_path, ("1", "0"), hosts=(first, second), extra=("--max-restarts", "1"))

    assert {rank: (report["group_rank"], report["node_tag"]) for rank, report in reports.items()} == {
        0: (0, "started-1"), 1: (1, "started-0")}
    assert all(report["sum"] == 3.0 for report in reports.values())


def test_a_hot_spares_node_rank_takes_its_place_among_the_rounds_ranks(tmp_path: Path) -> None:
    # A spare (node rank N or above) that replaced node k: the round's node ranks are distinct, not 0 to N-1.
    reports = _run_two(tmp_path, ("3", "1"))

    assert {rank: (report["group_rank"], report["node_tag"]) for rank, report in reports.items()} == {
        0: (0, "started-1"), 1: (1, "started-0")}

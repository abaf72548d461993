"""plan_workers, the launcher's planner: which CPUs it plans for, from which description."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.conftest import MachineRoot
from tests.fixtures.machines import DGX_H100, SNAPSHOTS
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.launcher.worker_binding import plan_workers
from torchx_ext.numa.cpulist import format_cpulist, parse_cpulist
from torchx_ext.numa.machine import topology_of
from torchx_ext.numa.topology import ALL_ONLINE, Topology, read_topology

NODE_1 = parse_cpulist("56-111,168-223")


def cpus_of(plan_cpus: list[frozenset[int]]) -> list[str]:
    return [format_cpulist(cpus) for cpus in plan_cpus]


def test_allowed_cpus_are_what_the_plan_is_for(machine_root: MachineRoot) -> None:
    # A replica's slice (here dgx-h100's node 1), whatever this process's own affinity.
    root = str(machine_root("dgx-h100"))
    for dry_run, applied in [(True, [None, None]), (False, ["56-83,168-195", "84-111,196-223"])]:
        plan, bindings = plan_workers(
            2, "exclusive", sysfs_root=root, allowed_cpus=NODE_1, dry_run=dry_run, env={}, device_kind="cpu"
        )
        assert all(rank.numa_node == 1 for rank in plan.ranks)
        assert cpus_of([rank.cpus for rank in plan.ranks]) == ["56-83,168-195", "84-111,196-223"]
        assert [binding.cpus for binding in bindings] == applied


def test_another_machines_tree_is_planned_whole_only_when_nothing_is_applied(machine_root: MachineRoot) -> None:
    root = str(machine_root("cpu-2socket"))
    shown, _ = plan_workers(2, "node", sysfs_root=root, dry_run=True, env={})
    assert frozenset().union(*(rank.cpus for rank in shown.ranks)) == frozenset(range(64))
    applied, _ = plan_workers(2, "node", sysfs_root=root, env={})
    mine = frozenset(os.sched_getaffinity(0))
    assert all(rank.cpus <= mine for rank in applied.ranks)


def test_a_given_topology_is_planned_as_the_tree_it_describes(machine_root: MachineRoot) -> None:
    described, _ = plan_workers(8, "exclusive", topology=topology_of(DGX_H100, "dgx"), dry_run=True, env={})
    read, _ = plan_workers(8, "exclusive", sysfs_root=str(machine_root("dgx-h100")), dry_run=True, env={})
    assert described == read


def test_topology_and_allowed_cpus_together_are_refused(machine_topology: Callable[[str], Topology]) -> None:
    with pytest.raises(InvalidArgumentError, match="topology or allowed_cpus, not both"):
        plan_workers(1, "node", topology=machine_topology("dgx-h100"), allowed_cpus={0})


def test_without_a_plan_ranks_keep_the_cpus_they_were_planned_for(machine_root: MachineRoot) -> None:
    # A GPU named by UUID cannot be mapped: mode auto goes on unbound, within the given CPUs.
    env = {"CUDA_VISIBLE_DEVICES": "GPU-0b7f"}
    root = str(machine_root("dgx-h100"))
    plan, _ = plan_workers(2, "auto", sysfs_root=root, allowed_cpus={60, 61}, dry_run=True, env=env)
    assert plan.mode == "none" and [rank.cpus for rank in plan.ranks] == [frozenset({60, 61})] * 2
    described = topology_of(DGX_H100, "dgx")
    plan, _ = plan_workers(2, "auto", topology=described, dry_run=True, env=env)
    assert [rank.cpus for rank in plan.ranks] == [described.allowed] * 2
    assert described.allowed == read_topology(root, ALL_ONLINE).allowed


def test_a_snapshot_of_another_host_is_planned_whole_and_bound_within_this_hosts_cpus() -> None:
    root = str(SNAPSHOTS / "gpu-2socket-8")  # what `python -m torchx_ext.numa snapshot` would write there
    plan, bindings = plan_workers(8, "node", sysfs_root=root, env={}, device_kind="gpu")

    assert [rank.numa_node for rank in plan.ranks] == [0, 0, 0, 1, 0, 1, 1, 1]  # GPU 3 is on socket 1
    assert frozenset().union(*(rank.cpus for rank in plan.ranks)) == frozenset(range(32))
    mine = frozenset(os.sched_getaffinity(0))
    for rank, binding in zip(plan.ranks, bindings):
        assert binding.cpus is not None and parse_cpulist(binding.cpus) == (rank.cpus & mine or mine)
        assert binding.numa_node is None  # its NUMA nodes need not exist here


def test_in_a_container_of_nvidias_runtime_rank_r_takes_the_rth_of_the_hosts_gpus_it_got(machine_root: MachineRoot) -> None:
    # Sysfs shows the whole host; NVIDIA_VISIBLE_DEVICES names the GPUs this container got.
    root = str(machine_root("dgx-h100"))
    plan, _ = plan_workers(2, "node", sysfs_root=root, dry_run=True, device_kind="gpu",
                           env={"NVIDIA_VISIBLE_DEVICES": "5,4"})
    assert [(rank.gpu_pci_address, rank.numa_node) for rank in plan.ranks] == [
        (DGX_H100.gpu_pci_address(4), 1), (DGX_H100.gpu_pci_address(5), 1)]
    # Device UUIDs (Kubernetes' device plugin) cannot be mapped: mode auto goes on unbound.
    unbound, _ = plan_workers(2, "auto", sysfs_root=root, dry_run=True, device_kind="gpu",
                              env={"NVIDIA_VISIBLE_DEVICES": "GPU-0b7f,GPU-77aa"})
    assert unbound.mode == "none"

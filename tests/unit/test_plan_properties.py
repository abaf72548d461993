"""Properties of plan_binding over random machines, and torch as the oracle on each of them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.fake_sysfs import write_sysfs
from tests.torch_oracle import torch_binding
from torchx_ext.numa.machine import MachineSpec
from torchx_ext.numa.plan import BindingPlan, plan_binding
from torchx_ext.numa.topology import Topology, read_topology

PLANNING_MODES = ["node", "socket", "exclusive", "core-complex"]


@st.composite
def machines(draw: st.DrawFn) -> tuple[MachineSpec, frozenset[int]]:
    """A random machine and a random cpuset (non-empty, online) on it."""
    sockets = draw(st.integers(1, 2))
    nodes_per_socket = draw(st.integers(1, 3))
    cores_per_node = draw(st.integers(1, 6))
    threads = draw(st.integers(1, 2))
    memory_only = draw(st.integers(0, 2))
    node_count = sockets * nodes_per_socket + memory_only
    cores_per_llc = draw(st.sampled_from([None, 1, 2, cores_per_node]))
    # Mostly GPUs on CPU nodes (where torch succeeds and can be compared), sometimes not.
    gpu_node = st.one_of(st.integers(0, sockets * nodes_per_socket - 1), st.integers(-1, node_count - 1))
    gpu_nodes = tuple(draw(st.lists(gpu_node, max_size=6)))
    total_cpus = sockets * nodes_per_socket * cores_per_node * threads
    offline = draw(st.frozensets(st.integers(1, total_cpus - 1), max_size=total_cpus // 3)) if total_cpus > 1 else frozenset()
    spec = MachineSpec(
        sockets=sockets,
        nodes_per_socket=nodes_per_socket,
        cores_per_node=cores_per_node,
        threads_per_core=threads,
        cores_per_llc=cores_per_llc,
        gpu_nodes=gpu_nodes,
        memory_only_nodes=memory_only,
        offline_cpus=offline,
        node_id_step=draw(st.sampled_from([1, 1, 2])),
        possible_only_nodes=draw(st.integers(0, 1)),
    )
    online = sorted(spec.online_cpus())
    # Either most of the machine (a typical cpuset) or any non-empty part of it.
    few_dropped = st.frozensets(st.sampled_from(online), max_size=max(1, len(online) // 4)).map(
        lambda dropped: frozenset(online) - dropped
    )
    allowed = draw(st.one_of(few_dropped, st.frozensets(st.sampled_from(online), min_size=1)).filter(bool))
    return spec, allowed


def read(spec: MachineSpec, allowed: frozenset[int], directory: str) -> Topology:
    return read_topology(write_sysfs(spec, directory), allowed)


def check_invariants(topology: Topology, plan: BindingPlan) -> None:
    for rank in plan.ranks:
        assert rank.cpus and rank.cpus <= topology.allowed
        # SMT siblings stay together: a rank that has one allowed thread of a core on its
        # node has every allowed thread of that core.
        for cpu in rank.cpus:
            siblings = {
                other for other in topology.nodes[topology.cpus[cpu].node].cpus
                if topology.cpus[other].core == topology.cpus[cpu].core
            }
            assert siblings <= rank.cpus, (rank.local_rank, cpu, siblings)
    if plan.device_kind == "gpu" and plan.mode != "none":
        for rank in plan.ranks:
            gpu = topology.gpus[rank.gpu] if rank.gpu is not None else None
            assert gpu is not None
            if gpu.numa_node in topology.nodes_with_cpus():
                assert rank.numa_node == gpu.numa_node
    if plan.mode == "exclusive" and not plan.warnings:
        cores = [{topology.cpus[cpu].core for cpu in rank.cpus} for rank in plan.ranks]
        for first in range(len(cores)):
            for second in range(first + 1, len(cores)):
                assert not cores[first] & cores[second], (first, second)
        for node in {rank.numa_node for rank in plan.ranks}:
            counts = [rank.threads for rank in plan.ranks if rank.numa_node == node]
            assert max(counts) - min(counts) <= 1


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    machine=machines(),
    nproc=st.integers(1, 8),
    mode=st.sampled_from(PLANNING_MODES + ["none", "auto"]),
    device_kind=st.sampled_from(["auto", "cpu"]),
)
def test_plans_hold_their_invariants(
    machine: tuple[MachineSpec, frozenset[int]], nproc: int, mode: str, device_kind: str
) -> None:
    spec, allowed = machine
    with tempfile.TemporaryDirectory() as directory:
        topology = read(spec, allowed, directory)
        if device_kind == "auto" and topology.gpus:
            nproc = min(nproc, len(topology.gpus))
        plan = plan_binding(topology, nproc, mode, device_kind=device_kind)
        assert len(plan.ranks) == nproc
        check_invariants(topology, plan)


def test_gpu_plans_equal_torch_on_random_machines() -> None:
    compared: list[int] = []

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(machine=machines(), mode=st.sampled_from(PLANNING_MODES))
    def compare(machine: tuple[MachineSpec, frozenset[int]], mode: str) -> None:
        spec, allowed = machine
        if not spec.gpu_nodes:
            return
        with tempfile.TemporaryDirectory() as directory:
            topology = read(spec, allowed, directory)
            plan = plan_binding(topology, len(topology.gpus), mode)
            pci = [gpu.pci_address for gpu in topology.gpus]
            with torch_binding(Path(directory), topology.allowed, pci) as oracle:
                for rank in plan.ranks:
                    expected = oracle.cpus(rank.local_rank, mode)
                    if not isinstance(expected, Exception):
                        assert rank.cpus == expected, (rank.local_rank, plan.warnings)
                        compared.append(rank.local_rank)

    compare()
    # The machines are drawn so that torch usually succeeds: a comparison that rarely
    # happens would pass whatever the planner did.
    assert len(compared) >= 150, len(compared)

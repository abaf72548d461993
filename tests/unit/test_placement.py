"""slice_host: how replicas sharing one host divide its CPUs and GPUs."""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_plan_properties import machines, read
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.machine import MachineSpec
from torchx_ext.numa.topology import Topology
from torchx_ext.schedulers.placement import ReplicaSlice, slice_host

TopologyOf = Callable[[str], Topology]


def summary(slices: list[ReplicaSlice]) -> list[tuple[str, tuple[int, ...], str]]:
    return [(format_cpulist(piece.cpus), piece.numa_nodes, piece.cuda_visible_devices) for piece in slices]


def test_two_replicas_on_this_kind_of_two_cpu_host_get_one_cpu_each(machine_topology: TopologyOf) -> None:
    assert summary(slice_host(machine_topology("dev-2cpu"), 2)) == [("0", (0,), ""), ("1", (0,), "")]


def test_one_replica_gets_the_whole_host(machine_topology: TopologyOf) -> None:
    topology = machine_topology("dgx-h100")
    assert summary(slice_host(topology, 1)) == [("0-223", (0, 1), "0,1,2,3,4,5,6,7")]


def test_as_many_nodes_as_replicas_gives_whole_nodes_and_their_gpus(machine_topology: TopologyOf) -> None:
    assert summary(slice_host(machine_topology("dgx-h100"), 2)) == [
        ("0-55,112-167", (0,), "0,1,2,3"),
        ("56-111,168-223", (1,), "4,5,6,7"),
    ]
    assert [piece.numa_nodes for piece in slice_host(machine_topology("epyc-nps4"), 3)] == [
        (0, 1), (2, 3, 4), (5, 6, 7)
    ]
    assert [piece.gpus for piece in slice_host(machine_topology("epyc-nps4"), 3)] == [(0, 1), (2, 3, 4), (5, 6, 7)]


def test_more_replicas_than_nodes_split_whole_cores_and_share_gpus_evenly(machine_topology: TopologyOf) -> None:
    assert summary(slice_host(machine_topology("dgx-h100"), 4)) == [
        ("0-27,112-139", (0,), "0,1"),
        ("28-55,140-167", (0,), "2,3"),
        ("56-83,168-195", (1,), "4,5"),
        ("84-111,196-223", (1,), "6,7"),
    ]


def test_gpus_on_memory_only_nodes_go_with_the_nearest_cpus(machine_topology: TopologyOf) -> None:
    assert [piece.gpus for piece in slice_host(machine_topology("gb200-gpu-memory-nodes"), 2)] == [(0, 2), (1, 3)]


def test_gpus_without_a_node_are_shared_out(machine_topology: TopologyOf) -> None:
    assert [piece.gpus for piece in slice_host(machine_topology("vm-gpu-node-unknown"), 2)] == [(0, 2), (1, 3)]


def test_a_cpuset_is_respected(machine_topology: TopologyOf) -> None:
    slices = slice_host(machine_topology("dgx-h100-cpuset"), 2)
    assert summary(slices)[0][0] == "50-55,162-167" and summary(slices)[1][0] == "56-61"


def test_more_replicas_than_cores_share_cores_and_say_so(machine_topology: TopologyOf) -> None:
    slices = slice_host(machine_topology("dev-2cpu"), 3)
    assert [format_cpulist(piece.cpus) for piece in slices] == ["0", "0", "1"]
    assert slices[0].warnings == ("2 physical cores for 3 replicas: replicas share cores",)


@pytest.mark.parametrize("replicas", [0, -1])
def test_replicas_below_one_is_an_error(replicas: int, machine_topology: TopologyOf) -> None:
    with pytest.raises(InvalidArgumentError, match=f"at least 1, got {replicas}"):
        slice_host(machine_topology("dgx-h100"), replicas)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machine=machines(), replicas=st.integers(1, 6))
def test_slices_partition_the_host(machine: tuple[MachineSpec, frozenset[int]], replicas: int) -> None:
    spec, allowed = machine
    with tempfile.TemporaryDirectory() as directory:
        topology = read(spec, allowed, directory)
        slices = slice_host(topology, replicas)
    assert len(slices) == replicas and all(piece.cpus for piece in slices)
    assert frozenset().union(*(piece.cpus for piece in slices)) == topology.allowed
    cores = topology.physical_core_count(topology.allowed)
    if cores >= replicas:
        for index, piece in enumerate(slices):
            for other in slices[index + 1 :]:
                assert not piece.cpus & other.cpus
    for piece in slices:  # SMT siblings stay together
        for cpu in piece.cpus:
            assert {other for other in topology.allowed if topology.cpus[other].core == topology.cpus[cpu].core} <= piece.cpus
    vendor_gpus = [gpu.index for gpu in topology.gpus_of("nvidia")]
    assert sorted(gpu for piece in slices for gpu in piece.gpus) == vendor_gpus

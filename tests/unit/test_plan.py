"""plan_binding on the fixture machines: the plans users get, the fallbacks and the errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.fixtures.machines import MACHINES
from torchx_ext.errors import BindingFallbackError, InvalidArgumentError
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.plan import (
    BindingPlan,
    parse_visible_devices,
    plan_binding,
    visible_devices_from_env,
)
from torchx_ext.numa.topology import Topology, read_topology
from torchx_ext.options import MODES

TopologyOf = Callable[[str], Topology]


def cpus(plan: BindingPlan) -> list[str]:
    return [format_cpulist(rank.cpus) for rank in plan.ranks]


def test_dgx_h100_exclusive_gives_each_gpu_a_quarter_of_its_node(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("dgx-h100"), 8, "exclusive")
    assert cpus(plan) == [
        "0-13,112-125", "14-27,126-139", "28-41,140-153", "42-55,154-167",
        "56-69,168-181", "70-83,182-195", "84-97,196-209", "98-111,210-223",
    ]
    assert [rank.numa_node for rank in plan.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [rank.gpu for rank in plan.ranks] == list(range(8))
    assert {rank.threads for rank in plan.ranks} == {14}
    assert plan.device_kind == "gpu" and plan.warnings == ()


def test_exclusive_divides_a_node_among_the_ranks_launched_not_every_gpu(machine_topology: TopologyOf) -> None:
    # torch 2.13 would give these two ranks a quarter of node 0 each, as if all 4 GPUs ran.
    plan = plan_binding(machine_topology("dgx-h100"), 2, "exclusive")
    assert cpus(plan) == ["0-27,112-139", "28-55,140-167"]


def test_visible_devices_choose_the_gpus_and_their_nodes(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("dgx-h100"), 2, "node", visible_devices=(6, 1))
    assert [rank.numa_node for rank in plan.ranks] == [1, 0]
    assert [rank.gpu for rank in plan.ranks] == [0, 1]
    topology = machine_topology("dgx-h100")
    assert [rank.gpu_pci_address for rank in plan.ranks] == [topology.gpus[6].pci_address, topology.gpus[1].pci_address]


def test_epyc_core_complex_gives_each_gpu_an_l3_complex(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("epyc-nps4"), 8, "core-complex")
    assert cpus(plan)[:2] == ["0-7,128-135", "16-23,144-151"]
    assert {rank.threads for rank in plan.ranks} == {8}


def test_socket_mode_spans_the_sockets_nodes(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("epyc-nps4"), 8, "socket")
    assert cpus(plan)[0] == "0-63,128-191" and cpus(plan)[7] == "64-127,192-255"


def test_socket_mode_skips_memory_only_nodes_where_torch_fails(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("gb200"), 4, "socket")
    assert cpus(plan) == ["0-71", "0-71", "72-143", "72-143"]
    assert plan.warnings == ()


def test_cpu_only_ranks_spread_over_nodes_in_blocks(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("cpu-2socket"), 4, "exclusive")
    assert plan.device_kind == "cpu"
    assert [rank.numa_node for rank in plan.ranks] == [0, 0, 1, 1]
    assert cpus(plan) == ["0-7,32-39", "8-15,40-47", "16-23,48-55", "24-31,56-63"]
    assert all(rank.gpu is None for rank in plan.ranks)


def test_cpu_only_ranks_fewer_than_nodes_take_every_other_node(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("epyc-nps4"), 3, "node", device_kind="cpu")
    assert [rank.numa_node for rank in plan.ranks] == [0, 2, 5]
    assert plan.device_kind == "cpu" and all(rank.gpu is None for rank in plan.ranks)


def test_auto_is_node_on_multi_node_hosts_and_none_on_single_node(machine_topology: TopologyOf) -> None:
    multi = plan_binding(machine_topology("cpu-2socket"), 2)
    assert (multi.requested_mode, multi.mode) == ("auto", "node")
    single = plan_binding(machine_topology("gh200"), 1)
    assert single.mode == "none"
    assert single.ranks[0].cpus == machine_topology("gh200").allowed
    # A cpuset inside one node of a two-node host is a single-node host for this job.
    assert plan_binding(machine_topology("dgx-h100-node1-cpuset"), 2, device_kind="cpu").mode == "none"


def test_none_keeps_every_allowed_cpu(machine_topology: TopologyOf) -> None:
    topology = machine_topology("dgx-h100-cpuset")
    plan = plan_binding(topology, 3, "none", device_kind="cpu")
    assert all(rank.cpus == topology.allowed and rank.numa_node is None for rank in plan.ranks)
    assert plan.ranks[0].threads == 12


def test_threads_count_physical_cores(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("dgx-h100-cpuset"), 8, "node")
    # 50-55 with their siblings 162-167 are six cores; 56-61 without siblings are six more.
    assert [(format_cpulist(rank.cpus), rank.threads) for rank in plan.ranks][::4] == [
        ("50-55,162-167", 6),
        ("56-61", 6),
    ]


def test_gpu_on_a_node_outside_the_cpuset_falls_back_to_the_nearest_node(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("dgx-h100-node1-cpuset"), 8, "node")
    assert [rank.numa_node for rank in plan.ranks] == [1] * 8
    assert len(plan.warnings) == 4
    assert "NUMA node 0, which has no CPU this process may use" in plan.warnings[0]
    assert "nearest node with allowed CPUs, 1 (distance 32)" in plan.warnings[0]
    with pytest.raises(BindingFallbackError, match="strict NUMA binding refused"):
        plan_binding(machine_topology("dgx-h100-node1-cpuset"), 8, "node", strict=True)


def test_fallback_takes_the_nearest_node_by_distance(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("epyc-nps4-no-node0"), 8, "node")
    assert [rank.numa_node for rank in plan.ranks] == [1, 1, 2, 3, 4, 5, 6, 7]
    assert plan.warnings == (
        "GPU 0000:10:00.0 (local rank 0) is on NUMA node 0, which has no CPU this process may use; "
        "using the nearest node with allowed CPUs, 1 (distance 12)",
    )


def test_gpus_on_memory_only_nodes_use_their_sockets_cpu_node(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("gb200-gpu-memory-nodes"), 4, "exclusive")
    assert [rank.numa_node for rank in plan.ranks] == [0, 1, 0, 1]
    assert "is on NUMA node 2, which has no online CPU (memory-only" in plan.warnings[0]
    assert "nearest node with allowed CPUs, 0 (distance 40), sharing its cores" in plan.warnings[0]
    with pytest.raises(BindingFallbackError):
        plan_binding(machine_topology("gb200-gpu-memory-nodes"), 4, "exclusive", strict=True)


def test_core_complex_sharing_is_a_fallback(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("dgx-h100"), 8, "core-complex")
    assert cpus(plan) == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    assert plan.warnings == (
        "NUMA node 0 has 1 last-level-cache complex for 4 ranks; ranks share complexes",
        "NUMA node 1 has 1 last-level-cache complex for 4 ranks; ranks share complexes",
    )
    with pytest.raises(BindingFallbackError, match="ranks share complexes"):
        plan_binding(machine_topology("dgx-h100"), 8, "core-complex", strict=True)


def test_fallback_ranks_share_cores_and_native_ranks_keep_torchs_slices(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("dgx-h100-node1-cpuset"), 8, "exclusive")
    assert cpus(plan)[4:] == ["56-69,168-181", "70-83,182-195", "84-97,196-209", "98-111,210-223"]
    assert cpus(plan)[:4] == cpus(plan)[4:]
    assert all("sharing its cores" in warning for warning in plan.warnings)


def test_fewer_cores_than_ranks_share_cores_with_a_warning(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("dgx-h100-2cores"), 4, "exclusive")
    assert cpus(plan) == ["0,112", "0,112", "1,113", "1,113"]
    assert plan.warnings == ("NUMA node 0 has 2 allowed physical cores for 4 ranks; ranks share cores",)
    with pytest.raises(BindingFallbackError, match="2 allowed physical cores for 4 ranks"):
        plan_binding(machine_topology("dgx-h100-2cores"), 4, "exclusive", strict=True)


def test_gpu_without_numa_node_is_node_zero_with_a_warning(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("vm-gpu-node-unknown"), 4, "node")
    assert [rank.numa_node for rank in plan.ranks] == [0] * 4
    assert len(plan.warnings) == 4
    assert plan.warnings[0].endswith("reports no NUMA node (-1); assuming node 0, as torch does")
    assert plan_binding(machine_topology("vm-gpu-node-unknown"), 4, "none").warnings == ()


def test_gpu_without_numa_node_and_node_zero_outside_the_cpuset(machine_topology: TopologyOf) -> None:
    topology = read_topology(machine_topology("vm-gpu-node-unknown").root, range(8, 16))
    # Only node 1 has CPUs: there is nothing to guess, and nothing for strict to refuse.
    plan = plan_binding(topology, 2, "node", strict=True)
    assert [rank.numa_node for rank in plan.ranks] == [1, 1] and plan.warnings == ()


def test_gh200_binds_to_the_grace_node_not_the_gpu_memory_node(machine_topology: TopologyOf) -> None:
    for mode in ["node", "socket", "exclusive", "core-complex"]:
        plan = plan_binding(machine_topology("gh200"), 1, mode)
        assert cpus(plan) == ["0-71"] and plan.ranks[0].numa_node == 0 and plan.warnings == ()


def test_json_form_is_the_documented_contract(machine_topology: TopologyOf) -> None:
    plan = plan_binding(machine_topology("gb200"), 2, "exclusive")
    document = plan.to_json()
    assert document["mode"] == "exclusive" and document["warnings"] == []
    assert document["ranks"] == [
        {"local_rank": 0, "cpus": list(range(0, 36)), "numa_node": 0, "gpu": 0,
         "gpu_pci_address": machine_topology("gb200").gpus[0].pci_address, "threads": 36},
        {"local_rank": 1, "cpus": list(range(36, 72)), "numa_node": 0, "gpu": 1,
         "gpu_pci_address": machine_topology("gb200").gpus[1].pci_address, "threads": 36},
    ]


@pytest.mark.parametrize("mode", ["numa", "", "EXCLUSIVE", "core_complex"])
def test_unknown_mode_is_an_error_listing_the_modes(mode: str, machine_topology: TopologyOf) -> None:
    with pytest.raises(InvalidArgumentError) as error:
        plan_binding(machine_topology("dgx-h100"), 1, mode)
    assert repr(mode) in str(error.value) and ", ".join(MODES) in str(error.value)


@pytest.mark.parametrize("nproc", [0, -1])
def test_nproc_below_one_is_an_error(nproc: int, machine_topology: TopologyOf) -> None:
    with pytest.raises(InvalidArgumentError, match=f"at least 1, got {nproc}"):
        plan_binding(machine_topology("dgx-h100"), nproc, "node")


def test_more_gpu_ranks_than_visible_gpus_is_an_error(machine_topology: TopologyOf) -> None:
    with pytest.raises(InvalidArgumentError, match="3 GPU ranks need 3 visible GPUs, but 2 are visible"):
        plan_binding(machine_topology("dgx-h100"), 3, "node", visible_devices=(0, 1))
    with pytest.raises(InvalidArgumentError, match="9 GPU ranks need 9 visible GPUs, but 8"):
        plan_binding(machine_topology("dgx-h100"), 9, "node")
    # The same ranks as a CPU-only job are fine.
    assert len(plan_binding(machine_topology("dgx-h100"), 9, "node", device_kind="cpu").ranks) == 9


def test_gpu_kind_without_gpus_is_an_error(machine_topology: TopologyOf) -> None:
    with pytest.raises(InvalidArgumentError, match="but 0 are visible"):
        plan_binding(machine_topology("cpu-2socket"), 1, "node", device_kind="gpu")
    with pytest.raises(InvalidArgumentError, match="unknown device kind 'tpu'"):
        plan_binding(machine_topology("cpu-2socket"), 1, "node", device_kind="tpu")


def test_visible_device_beyond_the_host_is_an_error(machine_topology: TopologyOf) -> None:
    with pytest.raises(InvalidArgumentError, match="visible device 8 does not exist: this host has nvidia GPUs 0-7"):
        plan_binding(machine_topology("dgx-h100"), 1, "node", visible_devices=(8,))


@pytest.mark.parametrize(
    ("text", "indices"),
    [("0,1,2", (0, 1, 2)), ("3, 1", (3, 1)), ("", ()), ("-1", ()), ("0,-1,2", (0,))],
)
def test_visible_devices_follow_cuda_visible_devices(text: str, indices: tuple[int, ...]) -> None:
    assert parse_visible_devices(text) == indices


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("GPU-8f3e4c1a-0000-1111-2222-333344445555", "GPU UUID or MIG name"),
        ("MIG-GPU-8f3e4c1a/1/0", "GPU UUID or MIG name"),
        ("0,a", "not an index"),
        ("1,1", "lists GPU 1 twice"),
        ("--1", "not an index"),
        ("²", "not an index"),
    ],
)
def test_uuids_and_garbage_in_visible_devices_are_errors(text: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        parse_visible_devices(text, source="CUDA_VISIBLE_DEVICES")


def test_visible_devices_come_from_cuda_then_hip_env() -> None:
    assert visible_devices_from_env({}) is None
    assert visible_devices_from_env({"HIP_VISIBLE_DEVICES": "2"}) == (2,)
    assert visible_devices_from_env({"CUDA_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "2"}) == (1,)


@pytest.mark.parametrize("name", sorted(MACHINES))
@pytest.mark.parametrize("mode", MODES)
def test_every_fixture_and_mode_gives_every_rank_allowed_cpus(name: str, mode: str, machine_topology: TopologyOf) -> None:
    topology = machine_topology(name)
    for kind in ["cpu", "auto"]:
        nproc = len(topology.gpus) or 4
        plan = plan_binding(topology, nproc, mode, device_kind=kind)
        assert len(plan.ranks) == nproc
        for rank in plan.ranks:
            assert rank.cpus and rank.cpus <= topology.allowed
            assert rank.threads == topology.physical_core_count(rank.cpus) >= 1

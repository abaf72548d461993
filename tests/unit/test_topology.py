"""read_topology on the fixture machines: what it must see on each."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import MachineRoot
from tests.fixtures.fake_sysfs import write_sysfs
from tests.fixtures.machines import CPU_2SOCKET, OFFLINE
from torchx_ext.errors import InvalidArgumentError, TopologyError
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.machine import MachineSpec
from torchx_ext.numa.plan import plan_binding
from torchx_ext.numa.topology import ALL_ONLINE, DEFAULT_SYSFS_ROOT, Topology, planning_cpus, read_topology

TopologyOf = Callable[[str], Topology]


def node_cpus(topology: Topology) -> dict[int, str]:
    return {node.id: format_cpulist(node.cpus) for node in topology.nodes.values()}


def test_dgx_h100(machine_topology: TopologyOf) -> None:
    topology = machine_topology("dgx-h100")
    assert node_cpus(topology) == {0: "0-55,112-167", 1: "56-111,168-223"}
    assert topology.sockets() == [0, 1]
    assert topology.physical_core_count(topology.allowed) == 112
    assert topology.cpus[112].core == 0 and topology.cpus[0].core == 0
    assert [gpu.numa_node for gpu in topology.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    # The NVSwitch bridge (NVIDIA, class 0x0680) and the BMC's VGA (vendor 0x1a03) are not GPUs.
    assert len(topology.gpus) == 8
    assert [gpu.vendor for gpu in topology.gpus] == ["nvidia"] * 8
    assert topology.distance(0, 1) == 32


def test_gpus_are_in_pci_address_order(machine_topology: TopologyOf) -> None:
    addresses = [gpu.pci_address for gpu in machine_topology("dgx-h100").gpus]
    assert addresses == sorted(addresses) and [gpu.index for gpu in machine_topology("dgx-h100").gpus] == list(range(8))


def test_epyc_nps4_has_eight_nodes_of_two_l3_complexes(machine_topology: TopologyOf) -> None:
    topology = machine_topology("epyc-nps4")
    assert len(topology.nodes_with_cpus()) == 8
    assert {topology.socket_of_node(node) for node in range(4)} == {0}
    assert {topology.socket_of_node(node) for node in range(4, 8)} == {1}
    complexes = topology.group_by_llc(topology.nodes[0].cpus)
    assert [format_cpulist(cpus) for cpus in complexes.values()] == ["0-7,128-135", "8-15,136-143"]
    assert {gpu.vendor for gpu in topology.gpus} == {"amd"}
    assert topology.distance(0, 3) == 12 and topology.distance(0, 4) == 32


def test_gh200_memory_only_nodes_are_kept_without_cpus(machine_topology: TopologyOf) -> None:
    topology = machine_topology("gh200")
    assert topology.nodes_with_cpus() == [0]
    assert sorted(topology.nodes) == list(range(9))
    assert all(topology.nodes[node].cpuless for node in range(1, 9))
    assert topology.gpus[0].numa_node == 0


def test_gb200_two_grace_nodes_and_memory_only_nodes(machine_topology: TopologyOf) -> None:
    topology = machine_topology("gb200")
    assert node_cpus(topology) == {0: "0-71", 1: "72-143", 2: "", 3: "", 4: "", 5: ""}
    assert [gpu.numa_node for gpu in topology.gpus] == [0, 0, 1, 1]


def test_cpuset_container_sees_only_its_cpus(machine_topology: TopologyOf) -> None:
    topology = machine_topology("dgx-h100-cpuset")
    assert format_cpulist(topology.allowed) == "50-61,162-167"
    assert node_cpus(topology) == {0: "50-55,162-167", 1: "56-61"}
    assert set(topology.cpus) == set(topology.allowed)
    # Cores 56-61 have one allowed thread each, but they are still whole physical cores.
    assert topology.physical_core_count(topology.nodes[1].cpus) == 6
    assert topology.nodes[1].listed_cpus == frozenset(range(56, 112)) | frozenset(range(168, 224))


def test_offline_cpus_are_left_out(machine_topology: TopologyOf) -> None:
    topology = machine_topology("offline-cpus")
    assert format_cpulist(topology.online) == "0-2,4,6-11,13-18,20-31"
    assert topology.allowed == topology.online
    assert 3 not in topology.nodes[0].cpus and 19 not in topology.nodes[1].cpus
    # Core 5 lost one of its two threads; CPU 21 is still on core 5.
    assert topology.cpus[21].core == 21
    assert topology.physical_core_count(topology.allowed) == 15


def test_snapshot_of_a_real_two_cpu_host(machine_topology: TopologyOf) -> None:
    topology = machine_topology("dev-2cpu")
    assert node_cpus(topology) == {0: "0-1"}
    assert topology.gpus == ()
    assert topology.physical_core_count(topology.allowed) == 2


def test_snapshot_of_a_real_h100_vm_whose_gpu_reports_no_numa_node(machine_topology: TopologyOf) -> None:
    topology = machine_topology("h100-vm")
    assert node_cpus(topology) == {0: "0-15"}
    assert [(gpu.pci_address, gpu.numa_node) for gpu in topology.gpus] == [("0000:00:06.0", None)]
    assert topology.physical_core_count(topology.allowed) == 16


def test_gpu_with_unknown_numa_node(machine_topology: TopologyOf) -> None:
    assert [gpu.numa_node for gpu in machine_topology("vm-gpu-node-unknown").gpus] == [None] * 4


def test_sparse_node_ids_and_possible_but_offline_nodes(machine_topology: TopologyOf) -> None:
    topology = machine_topology("sparse-node-ids")
    assert sorted(topology.nodes) == [0, 2]
    assert node_cpus(topology) == {0: "0-3,8-11", 2: "4-7,12-15"}
    # Distances are matched to node ids, not to positions.
    assert topology.distance(0, 2) == 32 and topology.distance(2, 0) == 32
    assert [gpu.numa_node for gpu in topology.gpus] == [0, 2]


def test_cpus_in_no_node_join_the_lowest_node(tmp_path: Path) -> None:
    root = write_sysfs(CPU_2SOCKET, tmp_path)
    (root / "devices/system/node/node1/cpulist").unlink()
    topology = read_topology(root, ALL_ONLINE)
    assert node_cpus(topology) == {0: "0-63", 1: ""}
    assert plan_binding(topology, 2, "node", device_kind="cpu").ranks[1].cpus == topology.allowed


def test_offline_cpus_are_not_online_when_the_online_file_is_missing(tmp_path: Path) -> None:
    root = write_sysfs(OFFLINE, tmp_path)
    (root / "devices/system/cpu/online").unlink()
    assert read_topology(root, ALL_ONLINE).online == OFFLINE.online_cpus()


def test_amd_instinct_processing_accelerators_are_gpus_and_vendors_are_numbered_apart(tmp_path: Path) -> None:
    root = write_sysfs(MachineSpec(sockets=2, gpu_nodes=(0, 1)), tmp_path)
    for address, device_class, node in [("0000:01:00.0", "0x030000", "0"), ("0000:f0:00.0", "0x120000", "1")]:
        device = root / "bus/pci/devices" / address
        device.mkdir(parents=True)
        (device / "class").write_text(device_class + "\n")
        (device / "vendor").write_text("0x1002\n")
        (device / "numa_node").write_text(node + "\n")
    topology = read_topology(root, ALL_ONLINE)
    assert [(gpu.vendor, gpu.index) for gpu in topology.gpus] == [
        ("amd", 0), ("nvidia", 0), ("nvidia", 1), ("amd", 1)
    ]
    # CUDA_VISIBLE_DEVICES=1 is the second NVIDIA GPU, whatever AMD parts sit before it.
    plan = plan_binding(topology, 1, "node", visible_devices=(1,))
    assert plan.ranks[0].numa_node == 1
    assert plan_binding(topology, 2, "node", gpu_vendor="amd").ranks[1].gpu_pci_address == "0000:f0:00.0"


def test_real_sysfs_is_limited_to_this_process_affinity() -> None:
    topology = read_topology()
    assert topology.allowed == frozenset(os.sched_getaffinity(0))
    assert set(topology.cpus) == set(topology.allowed)
    assert topology.nodes_with_cpus()


def test_planning_for_another_machines_tree_takes_all_its_cpus(machine_root: MachineRoot) -> None:
    root = machine_root("offline-cpus")
    shown = read_topology(root, planning_cpus(root, applying=False))
    assert shown.allowed == OFFLINE.online_cpus()
    # A plan applied here may only hold CPUs this process may use, whatever tree describes them.
    applied = read_topology(root, planning_cpus(root, applying=True))
    assert applied.allowed == frozenset(os.sched_getaffinity(0)) & OFFLINE.online_cpus()


def test_planning_for_this_host_takes_this_process_cpus(tmp_path: Path) -> None:
    link = tmp_path / "sys-link"
    link.symlink_to(DEFAULT_SYSFS_ROOT)
    roots: list[str | Path] = [DEFAULT_SYSFS_ROOT, "/sys/", link]
    for root in roots:
        assert planning_cpus(root, applying=False) is None
        assert planning_cpus(root, applying=True) is None


def test_allowed_override_is_intersected_with_online_cpus(machine_root: MachineRoot) -> None:
    topology = read_topology(machine_root("offline-cpus"), allowed_cpus=range(0, 6))
    assert format_cpulist(topology.allowed) == "0-2,4"


def test_allowed_set_without_online_cpu_is_an_error(machine_root: MachineRoot) -> None:
    with pytest.raises(InvalidArgumentError, match=r"allowed CPUs 3,12 include no online CPU"):
        read_topology(machine_root("offline-cpus"), allowed_cpus={3, 12})
    with pytest.raises(InvalidArgumentError, match=r"\(empty\)"):
        read_topology(machine_root("offline-cpus"), allowed_cpus=set())


def test_missing_sysfs_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="does not exist"):
        read_topology(tmp_path / "nowhere")
    with pytest.raises(TopologyError, match="sysfs root"):
        read_topology(tmp_path)


def test_kernel_without_numa_is_one_node(tmp_path: Path) -> None:
    cpu = tmp_path / "devices/system/cpu"
    for index in range(4):
        (cpu / f"cpu{index}").mkdir(parents=True)
    (cpu / "online").write_text("0-3\n")
    topology = read_topology(tmp_path, ALL_ONLINE)
    assert node_cpus(topology) == {0: "0-3"}
    assert topology.physical_core_count(topology.allowed) == 4


def test_unparsable_sysfs_file_is_a_topology_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("zero\n")
    with pytest.raises(TopologyError, match="devices/system/cpu/online"):
        read_topology(tmp_path)

"""Write sysfs trees for machines described in a few numbers.

Tests, benchmarks and dry runs use these trees to see how a plan comes out on hardware
this host is not: read_topology(root) cannot tell them from the real thing. The trees hold
what the kernel shows, offline CPUs included: no topology or cache directory for an offline
CPU, and sibling, cache and node lists that leave it out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from torchx_ext.numa.cpulist import format_cpulist

NVIDIA = 0x10DE
AMD = 0x1002
_GPU_CLASS = 0x030200  # "3D controller", as data-center GPUs report themselves
_NVSWITCH = ("0000:05:00.0", 0x068000, NVIDIA)  # an NVIDIA bridge: not a GPU
_BMC_VGA = ("0000:02:00.0", 0x030000, 0x1A03)  # a display controller of another vendor
_NIC = ("0000:03:00.0", 0x020000, 0x15B3)


@dataclass(frozen=True)
class MachineSpec:
    """A machine in a few numbers.

    Logical CPU ``t * total_cores + c`` is hardware thread ``t`` of physical core ``c``, cores
    numbered socket by socket and node by node (Linux's usual x86 numbering, siblings c and
    c+N). Memory-only nodes come after the nodes with CPUs and belong to sockets round-robin.
    """

    sockets: int = 1
    nodes_per_socket: int = 1
    cores_per_node: int = 4
    threads_per_core: int = 1
    cores_per_llc: int | None = None
    """Cores sharing one last-level cache; None means one per socket."""
    gpu_nodes: tuple[int, ...] = ()
    """NUMA node of each GPU, in PCI order; -1 for a GPU whose sysfs numa_node is -1."""
    gpu_vendor: int = NVIDIA
    memory_only_nodes: int = 0
    offline_cpus: frozenset[int] = field(default_factory=frozenset)
    remote_socket_distance: int = 32
    same_socket_distance: int = 12
    node_id_step: int = 1
    """Sysfs id of node i is ``i * node_id_step``: 2 gives sparse ids 0, 2, 4, ..."""
    possible_only_nodes: int = 0
    """Node ids after the last online one that ``possible`` lists but that have no directory."""

    @property
    def cpu_nodes(self) -> int:
        return self.sockets * self.nodes_per_socket

    @property
    def total_cores(self) -> int:
        return self.cpu_nodes * self.cores_per_node

    @property
    def total_cpus(self) -> int:
        return self.total_cores * self.threads_per_core

    def node_count(self) -> int:
        return self.cpu_nodes + self.memory_only_nodes

    def node_id(self, node: int) -> int:
        """The sysfs id of logical node ``node`` (-1 stays -1: no node)."""
        return node if node < 0 else node * self.node_id_step

    def online_cpus(self) -> frozenset[int]:
        return frozenset(range(self.total_cpus)) - self.offline_cpus

    def core_of(self, cpu: int) -> int:
        return cpu % self.total_cores

    def node_of_core(self, core: int) -> int:
        return core // self.cores_per_node

    def socket_of_node(self, node: int) -> int:
        if node < self.cpu_nodes:
            return node // self.nodes_per_socket
        return (node - self.cpu_nodes) % self.sockets

    def threads_of_core(self, core: int) -> list[int]:
        return [thread * self.total_cores + core for thread in range(self.threads_per_core)]

    def llc_of_core(self, core: int) -> int:
        socket = self.socket_of_node(self.node_of_core(core))
        if self.cores_per_llc is None:
            return socket
        return core // self.cores_per_llc

    def distance(self, a: int, b: int) -> int:
        if a == b:
            return 10
        if a >= self.cpu_nodes or b >= self.cpu_nodes:
            return 40 if self.socket_of_node(a) == self.socket_of_node(b) else 80
        if self.socket_of_node(a) == self.socket_of_node(b):
            return self.same_socket_distance
        return self.remote_socket_distance


def write_sysfs(spec: MachineSpec, root: str | os.PathLike[str]) -> Path:
    """Write ``spec`` as a sysfs tree under ``root`` (created if needed); returns the root."""
    base = Path(root)
    online = spec.online_cpus()
    cpu_dir = base / "devices/system/cpu"
    all_cpus = range(spec.total_cpus)
    _write(cpu_dir / "possible", format_cpulist(all_cpus))
    _write(cpu_dir / "present", format_cpulist(all_cpus))
    _write(cpu_dir / "online", format_cpulist(online))
    _write(cpu_dir / "offline", format_cpulist(spec.offline_cpus))
    cores_in_llc: dict[int, list[int]] = {}
    for core in range(spec.total_cores):
        cores_in_llc.setdefault(spec.llc_of_core(core), []).append(core)
    for cpu in all_cpus:
        _write_cpu(spec, cpu_dir / f"cpu{cpu}", cpu, online, cores_in_llc)
    _write_nodes(spec, base / "devices/system/node", online)
    _write_pci(spec, base / "bus/pci/devices")
    return base


def _write_cpu(
    spec: MachineSpec, path: Path, cpu: int, online: frozenset[int], cores_in_llc: dict[int, list[int]]
) -> None:
    if cpu != 0:
        _write(path / "online", "1" if cpu in online else "0")
    if cpu not in online:
        return
    core = spec.core_of(cpu)
    node = spec.node_of_core(core)
    siblings = online.intersection(spec.threads_of_core(core))
    llc_cpus = online.intersection(
        thread for other in cores_in_llc[spec.llc_of_core(core)] for thread in spec.threads_of_core(other)
    )
    topology = path / "topology"
    _write(topology / "physical_package_id", str(spec.socket_of_node(node)))
    _write(topology / "core_id", str(core % spec.cores_per_node))
    _write(topology / "thread_siblings_list", format_cpulist(siblings))
    caches = [(1, "Data", siblings), (1, "Instruction", siblings), (2, "Unified", siblings), (3, "Unified", llc_cpus)]
    for index, (level, kind, shared) in enumerate(caches):
        cache = path / f"cache/index{index}"
        _write(cache / "level", str(level))
        _write(cache / "type", kind)
        _write(cache / "shared_cpu_list", format_cpulist(shared))


def _write_nodes(spec: MachineSpec, path: Path, online: frozenset[int]) -> None:
    nodes = range(spec.node_count())
    ids = [spec.node_id(node) for node in nodes]
    possible = ids + [ids[-1] + spec.node_id_step * (extra + 1) for extra in range(spec.possible_only_nodes)]
    _write(path / "possible", format_cpulist(possible))
    _write(path / "online", format_cpulist(ids))
    _write(path / "has_cpu", format_cpulist(ids[: spec.cpu_nodes]))
    for node in nodes:
        cpus = [
            cpu for cpu in sorted(online) if node < spec.cpu_nodes and spec.node_of_core(spec.core_of(cpu)) == node
        ]
        node_dir = path / f"node{spec.node_id(node)}"
        _write(node_dir / "cpulist", format_cpulist(cpus))
        # One distance per online node, in id order, as the kernel writes them.
        _write(node_dir / "distance", " ".join(str(spec.distance(node, other)) for other in nodes))


def _write_pci(spec: MachineSpec, path: Path) -> None:
    devices = [_NVSWITCH, _BMC_VGA, _NIC] if spec.gpu_nodes else [_NIC]
    for address, device_class, vendor in devices:
        _write_pci_device(path / address, device_class, vendor, -1)
    for index, node in enumerate(spec.gpu_nodes):
        # Bus numbers rise with the index so that PCI order is GPU order.
        address = f"0000:{0x10 + 8 * index:02x}:00.0"
        _write_pci_device(path / address, _GPU_CLASS, spec.gpu_vendor, spec.node_id(node))


def _write_pci_device(path: Path, device_class: int, vendor: int, numa_node: int) -> None:
    _write(path / "class", f"0x{device_class:06x}")
    _write(path / "vendor", f"0x{vendor:04x}")
    _write(path / "numa_node", str(numa_node))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")

"""Machines described in a few numbers, and the Topology such a description means.

Named resources (``-h``) are MachineSpecs, so ``torchx topo -h NAME`` plans on
``topology_of(spec)`` without any sysfs tree. The tests write the same descriptions as
sysfs trees (tests/fixtures/fake_sysfs.py) and check that reading a tree back gives
exactly ``topology_of`` of its spec: the two cannot drift apart unnoticed.
Pure: no file access, no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchx_ext.numa.topology import GPU_VENDORS, Cpu, Gpu, NumaNode, Topology

NVIDIA = 0x10DE
AMD = 0x1002


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

    def gpu_pci_address(self, index: int) -> str:
        """The PCI address of GPU ``index``: bus numbers rise with the index, so PCI order is GPU order."""
        return f"0000:{0x10 + 8 * index:02x}:00.0"


def topology_of(spec: MachineSpec, root: str) -> Topology:
    """The Topology of ``spec`` with every online CPU allowed, as a reader of its sysfs tree sees it.

    ``root`` names where the description comes from (Topology.root: shown by ``show``, and
    in messages). Core and cache keys are the lowest online CPU of the core or cache, node
    ids and distances are the sysfs ones, GPUs are numbered in PCI order: what
    ``read_topology(tree, ALL_ONLINE)`` gives for the tree of ``spec``.
    """
    online = spec.online_cpus()
    logical_nodes = range(spec.node_count())
    cpus_of_node: dict[int, set[int]] = {node: set() for node in logical_nodes}
    for cpu in online:
        cpus_of_node[spec.node_of_core(spec.core_of(cpu))].add(cpu)
    nodes = {
        spec.node_id(node): NumaNode(
            id=spec.node_id(node),
            cpus=frozenset(cpus_of_node[node]),
            listed_cpus=frozenset(cpus_of_node[node]),
            distances={spec.node_id(other): spec.distance(node, other) for other in logical_nodes},
        )
        for node in logical_nodes
    }
    # The lowest online CPU of each last-level cache: the key a reader derives from shared_cpu_list.
    llc_key: dict[int, int] = {}
    for cpu in sorted(online):
        llc_key.setdefault(spec.llc_of_core(spec.core_of(cpu)), cpu)
    cpus = {}
    for cpu in sorted(online):
        core = spec.core_of(cpu)
        node = spec.node_of_core(core)
        cpus[cpu] = Cpu(
            id=cpu,
            node=spec.node_id(node),
            package=spec.socket_of_node(node),
            core=min(online.intersection(spec.threads_of_core(core))),
            llc=llc_key[spec.llc_of_core(core)],
        )
    return Topology(root=root, online=online, allowed=online, cpus=cpus, nodes=nodes, gpus=_gpus(spec))


def _gpus(spec: MachineSpec) -> tuple[Gpu, ...]:
    vendor = GPU_VENDORS.get(spec.gpu_vendor)
    if vendor is None:
        return ()  # a vendor read_topology does not know has no GPUs it would count
    return tuple(
        Gpu(
            index=index,
            pci_address=spec.gpu_pci_address(index),
            vendor=vendor,
            numa_node=None if node < 0 else spec.node_id(node),
        )
        for index, node in enumerate(spec.gpu_nodes)
    )

"""Dividing one host among the replicas that share it: pure, from a Topology to ReplicaSlices
(``host_topology`` reads that Topology, for local_cwd and local_docker alike).

When several replicas of a job run on one host (``-j 2x4`` on a workstation), each gets its
own slice of the CPUs this process may use and of the GPUs, so that simulated nodes do not
fight over the same cores. Whole NUMA nodes go to each replica when there are at least as
many nodes (with allowed CPUs) as replicas; otherwise whole physical cores, in node order,
split as evenly as they go. GPUs follow: a replica gets the GPUs on its nodes, or, when
replicas share nodes, an even share of the GPUs in node order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT, Gpu, Topology, planning_cpus, read_topology


@dataclass(frozen=True)
class ReplicaSlice:
    replica_id: int
    cpus: frozenset[int]
    numa_nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    """Indices among the host's GPUs of one vendor, as CUDA_VISIBLE_DEVICES counts them."""
    warnings: tuple[str, ...] = field(default=())

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(str(gpu) for gpu in self.gpus)

    def describe(self) -> str:
        nodes = ",".join(map(str, self.numa_nodes)) or "-"
        return (
            f"replica {self.replica_id}: cpus={format_cpulist(self.cpus)} numa_nodes={nodes} "
            f"gpus={self.cuda_visible_devices or '-'}"
        )


def slice_host(topology: Topology, replicas: int, gpu_vendor: str | None = None) -> list[ReplicaSlice]:
    """Slices of ``topology``'s allowed CPUs and GPUs for ``replicas`` replicas on this host."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidArgumentError(f"replicas on a host must be an integer of at least 1, got {replicas!r}")
    vendor = gpu_vendor or ("nvidia" if topology.gpus_of("nvidia") else "amd")
    gpus = topology.gpus_of(vendor)
    nodes = topology.nodes_with_cpus()
    if len(nodes) >= replicas:
        return _by_node(topology, replicas, nodes, gpus)
    return _by_core(topology, replicas, gpus)


def _by_node(topology: Topology, replicas: int, nodes: list[int], gpus: tuple[Gpu, ...]) -> list[ReplicaSlice]:
    slices = []
    for replica in range(replicas):
        mine = nodes[replica * len(nodes) // replicas : (replica + 1) * len(nodes) // replicas]
        cpus = frozenset().union(*(topology.nodes[node].cpus for node in mine))
        slices.append(ReplicaSlice(replica, cpus, tuple(mine), ()))
    return _with_gpus(topology, slices, gpus)


def _by_core(topology: Topology, replicas: int, gpus: tuple[Gpu, ...]) -> list[ReplicaSlice]:
    # Cores in node order (then core order), so that a replica's cores sit together.
    cores = sorted(
        topology.group_by_core(topology.allowed).values(),
        key=lambda cpus: (topology.cpus[min(cpus)].node, min(cpus)),
    )
    slices = []
    for replica in range(replicas):
        if len(cores) >= replicas:
            mine = cores[replica * len(cores) // replicas : (replica + 1) * len(cores) // replicas]
            warnings: tuple[str, ...] = ()
        else:
            mine = [cores[replica * len(cores) // replicas]]
            warnings = (
                f"{len(cores)} physical core{'' if len(cores) == 1 else 's'} for {replicas} replicas: "
                "replicas share cores",
            )
        cpus = frozenset().union(*mine)
        nodes = tuple(sorted({topology.cpus[cpu].node for cpu in cpus}))
        slices.append(ReplicaSlice(replica, cpus, nodes, (), warnings))
    return _with_gpus(topology, slices, gpus)


def _with_gpus(topology: Topology, slices: list[ReplicaSlice], gpus: tuple[Gpu, ...]) -> list[ReplicaSlice]:
    if not gpus:
        return slices
    whole_nodes = all(
        not set(first.numa_nodes) & set(second.numa_nodes)
        for index, first in enumerate(slices)
        for second in slices[index + 1 :]
    )
    assigned: list[list[int]] = [[] for _ in slices]
    if whole_nodes:
        owner = {node: index for index, piece in enumerate(slices) for node in piece.numa_nodes}
        homeless = []
        for gpu in gpus:
            # A GPU on a memory-only node (or one outside the cpuset) goes with the nearest CPUs.
            nearest = None if gpu.numa_node is None else topology.nearest_node_with_cpus(gpu.numa_node)
            if nearest in owner:
                assigned[owner[nearest]].append(gpu.index)
            else:
                homeless.append(gpu.index)
        # GPUs with no NUMA node go to whoever has the fewest, in order.
        for index in homeless:
            min(assigned, key=len).append(index)
    else:
        ordered = sorted(gpus, key=lambda gpu: (gpu.numa_node if gpu.numa_node is not None else -1, gpu.index))
        for position, gpu in enumerate(ordered):
            assigned[position * len(slices) // len(ordered)].append(gpu.index)
    return [
        ReplicaSlice(piece.replica_id, piece.cpus, piece.numa_nodes, tuple(sorted(mine)), piece.warnings)
        for piece, mine in zip(slices, assigned)
    ]


def gpu_count(topology: Topology) -> int:
    """The GPUs CUDA_VISIBLE_DEVICES counts on this host: its NVIDIA GPUs, else its AMD ones."""
    return len(topology.gpus_of("nvidia") or topology.gpus_of("amd"))


def host_topology(sysfs_root: str | None) -> Topology:
    """The topology to slice, read from ``sysfs_root`` (default: this host's) for all of its
    CPUs: slices are planned before anyone knows whether the job will run here, and replicas
    are pinned by their scheduler, not by this process's own affinity; a tree of another
    machine (a fixture, a snapshot) is planned as a ``--dryrun`` shows it."""
    root = sysfs_root or DEFAULT_SYSFS_ROOT
    return read_topology(root, allowed_cpus=planning_cpus(root, applying=False))

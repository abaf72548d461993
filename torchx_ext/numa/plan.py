"""Binding policy: which CPUs each local rank gets. Pure: a Topology in, a BindingPlan out.

For GPU jobs (local rank i drives visible GPU i) the CPU sets are those torch 2.13's
``torch.numa.binding`` computes, wherever torch succeeds. Where torch raises or would be
wrong, the plan falls back (nearest NUMA node with allowed CPUs, or shared cores) and says
so in ``BindingPlan.warnings``; ``strict=True`` turns each such fallback into an error.

Deliberate differences from torch, each because torch's answer hurts the user:
- ``exclusive`` and ``core-complex`` divide a node among the ranks launched on it, not among
  every visible GPU on it (torch gives 2 ranks on an 8-GPU host a quarter node each).
- ``socket`` ignores nodes without allowed CPUs (memory-only GPU/CXL memory, or outside the
  container's cpuset) instead of failing.
- CPU-only jobs are planned too: rank r's home is node ``r * n_nodes // nproc`` among the
  nodes with allowed CPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from torchx_ext.errors import BindingFallbackError, InvalidArgumentError
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.topology import Gpu, Topology
from torchx_ext.options import DEVICE_KINDS, MODES

VISIBLE_DEVICES_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class RankBinding:
    local_rank: int
    cpus: frozenset[int]
    numa_node: int | None
    """The node the CPUs were chosen from; None in mode ``none``."""
    gpu: int | None
    """The device ordinal the rank uses (``cuda:N``); None for CPU-only jobs."""
    gpu_pci_address: str | None
    threads: int
    """Physical cores in ``cpus``: a sensible OMP_NUM_THREADS."""

    def to_json(self) -> dict[str, object]:
        return {
            "local_rank": self.local_rank,
            "cpus": sorted(self.cpus),
            "numa_node": self.numa_node,
            "gpu": self.gpu,
            "gpu_pci_address": self.gpu_pci_address,
            "threads": self.threads,
        }


@dataclass(frozen=True)
class BindingPlan:
    mode: str
    """The mode applied: ``auto`` is resolved to ``node`` or ``none``."""
    requested_mode: str
    device_kind: str
    """``gpu`` or ``cpu``, as resolved from the requested kind and the visible GPUs."""
    ranks: tuple[RankBinding, ...]
    warnings: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "requested_mode": self.requested_mode,
            "device_kind": self.device_kind,
            "ranks": [rank.to_json() for rank in self.ranks],
            "warnings": list(self.warnings),
        }


def parse_visible_devices(text: str, *, source: str = "visible devices") -> tuple[int, ...]:
    """Parse a CUDA_VISIBLE_DEVICES-style list of integer GPU indices.

    An empty value or ``-1`` hides every GPU. UUIDs and MIG names cannot be matched to a
    PCI device from sysfs alone, so they are rejected rather than guessed.
    """
    indices: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if item.startswith("-") and _is_number(item[1:]):
            break  # CUDA stops enumerating at the first invalid index; -1 means "none".
        if not _is_number(item):
            kind = "a GPU UUID or MIG name" if item.upper().startswith(("GPU-", "MIG-")) else "not an index"
            raise InvalidArgumentError(
                f"{source} {text!r}: {item!r} is {kind}; give comma-separated integer GPU "
                "indices in nvidia-smi order (e.g. '0,1,2,3'), empty or -1 for no GPU"
            )
        if int(item) in indices:
            raise InvalidArgumentError(f"{source} {text!r} lists GPU {item} twice")
        indices.append(int(item))
    return tuple(indices)


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def visible_devices_from_env(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """The visible GPU indices an environment selects, or None when it selects all.

    Inside a container of NVIDIA's runtime (Docker's device requests, Kubernetes' device plugin)
    ``NVIDIA_VISIBLE_DEVICES`` names the host's GPUs the container got, while sysfs still shows
    every GPU of the host: CUDA there numbers the GPUs it got from 0, in PCI order, so their
    host indices, sorted, are what local rank r takes. UUIDs and MIG names cannot be mapped."""
    for name in VISIBLE_DEVICES_ENV_VARS:
        if name in env:
            return parse_visible_devices(env[name], source=name)
    given = env.get(NVIDIA_VISIBLE_DEVICES)
    if given is None or given.strip() in ("", "all"):
        return None
    if given.strip() in ("none", "void"):
        return ()
    return tuple(sorted(parse_visible_devices(given, source=NVIDIA_VISIBLE_DEVICES)))


def plan_binding(
    topology: Topology,
    nproc_per_node: int,
    mode: str = "auto",
    visible_devices: Sequence[int] | None = None,
    device_kind: str = "auto",
    strict: bool = False,
    gpu_vendor: str | None = None,
) -> BindingPlan:
    """Plan the CPU set, NUMA node, GPU and thread count of each local rank.

    GPUs are those of ``gpu_vendor`` (default: NVIDIA if the host has any, else AMD), as
    CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES each count only their own vendor's.
    ``visible_devices`` are indices among them in PCI order; None means all are visible.
    """
    _check_choice("NUMA binding mode", mode, MODES)
    _check_choice("device kind", device_kind, DEVICE_KINDS)
    if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1:
        raise InvalidArgumentError(
            f"nproc per node must be an integer of at least 1, got {nproc_per_node!r}"
        )
    visible = _visible_gpus(topology, visible_devices, gpu_vendor)
    kind = _resolve_device_kind(device_kind, visible, nproc_per_node)
    resolved_mode = mode
    if mode == "auto":
        resolved_mode = "node" if len(topology.nodes_with_cpus()) > 1 else "none"
    planner = _Planner(topology, nproc_per_node, resolved_mode, visible if kind == "gpu" else ())
    ranks = planner.plan()
    if strict and planner.fallbacks:
        raise BindingFallbackError(
            "strict NUMA binding refused these fallbacks: "
            + "; ".join(planner.fallbacks)
            + " (drop strict to accept them, or choose another mode or set of CPUs)"
        )
    return BindingPlan(
        mode=resolved_mode,
        requested_mode=mode,
        device_kind=kind,
        ranks=ranks,
        warnings=tuple(planner.fallbacks),
    )


def _check_choice(what: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise InvalidArgumentError(f"unknown {what} {value!r}: valid values are {', '.join(choices)}")


def _visible_gpus(
    topology: Topology, visible_devices: Sequence[int] | None, vendor: str | None
) -> tuple[Gpu, ...]:
    if vendor is None:
        vendor = "nvidia" if topology.gpus_of("nvidia") else "amd"
    candidates = topology.gpus_of(vendor)
    if visible_devices is None:
        return candidates
    gpus: list[Gpu] = []
    for index in visible_devices:
        if not 0 <= index < len(candidates):
            have = f"{vendor} GPUs 0-{len(candidates) - 1}" if candidates else f"no {vendor} GPU"
            raise InvalidArgumentError(
                f"visible device {index} does not exist: this host has {have} "
                f"(numbered in PCI order under {topology.root}/bus/pci/devices)"
            )
        gpus.append(candidates[index])
    return tuple(gpus)


def _resolve_device_kind(requested: str, visible: tuple[Gpu, ...], nproc: int) -> str:
    if requested == "cpu" or (requested == "auto" and not visible):
        return "cpu"
    if nproc > len(visible):
        ranks = "1 GPU rank needs 1 visible GPU" if nproc == 1 else f"{nproc} GPU ranks need {nproc} visible GPUs"
        raise InvalidArgumentError(
            f"{ranks}, but {len(visible)} {'is' if len(visible) == 1 else 'are'} visible: "
            "lower nproc per node, make more "
            "GPUs visible (CUDA_VISIBLE_DEVICES), or plan a CPU-only job (device kind 'cpu')"
        )
    return "gpu"


class _Planner:
    """One planning pass; collects the fallbacks it takes (which strict refuses)."""

    def __init__(self, topology: Topology, nproc: int, mode: str, gpus: tuple[Gpu, ...]) -> None:
        self.topology = topology
        self.nproc = nproc
        self.mode = mode
        self.gpus = gpus
        self.fallbacks: list[str] = []

    def plan(self) -> tuple[RankBinding, ...]:
        nodes = [self._node(rank) for rank in range(self.nproc)]
        # Ranks divide a node among those with the same home: for GPU ranks, as torch divides
        # it among the GPUs on it. Ranks moved there by a fallback share it on top.
        peers: dict[tuple[int, int], list[int]] = {}
        for rank, placement in enumerate(nodes):
            peers.setdefault(placement, []).append(rank)
        bindings = []
        for rank, placement in enumerate(nodes):
            cpus = self._cpus(rank, placement[0], peers[placement])
            gpu = self.gpus[rank] if self.gpus else None
            bindings.append(
                RankBinding(
                    local_rank=rank,
                    cpus=cpus,
                    numa_node=None if self.mode == "none" else placement[0],
                    gpu=None if gpu is None else rank,
                    gpu_pci_address=None if gpu is None else gpu.pci_address,
                    threads=self.topology.physical_core_count(cpus),
                )
            )
        return tuple(bindings)

    def _node(self, rank: int) -> tuple[int, int]:
        """(node whose CPUs the rank uses, its home node); (-1, -1) when mode is none.

        The home node groups ranks as torch groups GPUs: a GPU reporting no node (-1) counts
        as node 0's, like in torch.numa.binding, wherever its CPUs then come from.
        """
        if self.mode == "none":
            return (-1, -1)
        with_cpus = self.topology.nodes_with_cpus()
        if not self.gpus:
            home = with_cpus[rank * len(with_cpus) // self.nproc]
            return (home, home)
        gpu = self.gpus[rank]
        if gpu.numa_node is not None:
            return (self._usable_node(rank, gpu.numa_node), gpu.numa_node)
        if len(with_cpus) == 1:
            return (with_cpus[0], 0)  # one node to choose from: no guess involved
        node = 0 if 0 in with_cpus else self.topology.nearest_node_with_cpus(0)
        assert node is not None  # read_topology guarantees at least one allowed CPU
        self.fallbacks.append(
            f"GPU {gpu.pci_address} (local rank {rank}) reports no NUMA node (-1); "
            + ("assuming node 0, as torch does" if node == 0 else f"node 0 has no allowed CPU, using node {node}")
        )
        return (node, 0)

    def _usable_node(self, rank: int, home: int) -> int:
        """``home`` if it has allowed CPUs, else the nearest node that has."""
        if home in self.topology.nodes_with_cpus():
            return home
        nearest = self.topology.nearest_node_with_cpus(home)
        assert nearest is not None  # read_topology guarantees at least one allowed CPU
        node = self.topology.nodes.get(home)
        why = (
            "is not online"
            if node is None
            else "has no online CPU (memory-only, or its CPUs are offline)"
            if node.cpuless
            else "has no CPU this process may use"
        )
        gpu = self.gpus[rank]  # only a GPU's node can lack CPUs: CPU ranks pick nodes that have them
        self.fallbacks.append(
            f"GPU {gpu.pci_address} (local rank {rank}) is on NUMA node {home}, which {why}; "
            f"using the nearest node with allowed "
            f"CPUs, {nearest} (distance {self.topology.distance(home, nearest)})"
            + (", sharing its cores" if self.mode in ("exclusive", "core-complex") else "")
        )
        return nearest

    def _cpus(self, rank: int, node: int, peers: list[int]) -> frozenset[int]:
        topology = self.topology
        if self.mode == "none":
            return topology.allowed
        node_cpus = topology.nodes[node].cpus
        if self.mode == "node":
            return node_cpus
        if self.mode == "socket":
            socket = topology.socket_of_node(node)
            return frozenset().union(
                *(
                    topology.nodes[other].cpus
                    for other in topology.nodes_with_cpus()
                    if topology.socket_of_node(other) == socket
                )
            )
        if self.mode == "exclusive":
            return self._exclusive(node, node_cpus, peers.index(rank), len(peers))
        return self._core_complex(node, node_cpus, peers.index(rank), len(peers))

    def _exclusive(self, node: int, node_cpus: frozenset[int], position: int, sharers: int) -> frozenset[int]:
        cores = list(self.topology.group_by_core(node_cpus).values())
        if len(cores) < sharers:
            if position == 0:
                self.fallbacks.append(
                    f"NUMA node {node} has {len(cores)} allowed physical core"
                    f"{'' if len(cores) == 1 else 's'} for {sharers} ranks; ranks share cores"
                )
            return cores[position * len(cores) // sharers]
        # torch's split: equal shares, the lowest positions take one extra core each.
        share, extra = divmod(len(cores), sharers)
        start = position * share + min(position, extra)
        end = start + share + (1 if position < extra else 0)
        return frozenset().union(*cores[start:end])

    def _core_complex(self, node: int, node_cpus: frozenset[int], position: int, sharers: int) -> frozenset[int]:
        complexes = sorted(
            self.topology.group_by_llc(node_cpus).items(),
            key=lambda item: (-len(item[1]), item[0]),
        )
        if len(complexes) < sharers and position == 0:
            self.fallbacks.append(
                f"NUMA node {node} has {len(complexes)} last-level-cache complex"
                f"{'' if len(complexes) == 1 else 'es'} for {sharers} ranks; ranks share complexes"
            )
        # More ranks than complexes share them round-robin, as torch does.
        return complexes[position % len(complexes)][1]


def describe_rank(rank: RankBinding, omp_threads: str) -> str:
    """One human line per rank, for launcher logs; ``omp_threads`` is what the worker's
    OMP_NUM_THREADS will be (the plan's ``threads`` is only what ``auto`` would choose)."""
    gpu = "-" if rank.gpu is None else f"{rank.gpu} ({rank.gpu_pci_address})"
    node = "-" if rank.numa_node is None else str(rank.numa_node)
    return (
        f"local_rank={rank.local_rank} cpus={format_cpulist(rank.cpus)} numa_node={node} "
        f"gpu={gpu} OMP_NUM_THREADS={omp_threads}"
    )

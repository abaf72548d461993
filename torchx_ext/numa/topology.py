"""The machine's CPU, NUMA and GPU layout, read from Linux sysfs.

Everything here is restricted to the CPUs this process may use: the online CPUs
intersected with the affinity mask (which already reflects a container's cgroup
cpuset) or an explicit override. Reading a fake sysfs root is how tests describe
machines this host is not.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from torchx_ext.errors import InvalidArgumentError, TopologyError
from torchx_ext.numa.cpulist import format_cpulist, parse_cpulist

DEFAULT_SYSFS_ROOT = "/sys"
ALL_ONLINE = "all"
GPU_VENDORS: Mapping[int, str] = {0x10DE: "nvidia", 0x1002: "amd"}
# Display controllers (0x03: VGA, 3D) for every vendor; AMD Instinct MI300-class parts
# present themselves as processing accelerators (0x12) instead.
_GPU_CLASSES: Mapping[str, tuple[int, ...]] = {"nvidia": (0x03,), "amd": (0x03, 0x12)}
_UNKNOWN_NUMA_NODE = -1
# The kernel's defaults, used when a node has no readable distance row.
_LOCAL_DISTANCE = 10
_REMOTE_DISTANCE = 20


@dataclass(frozen=True)
class Cpu:
    id: int
    node: int
    package: int
    # The lowest logical CPU listed in its thread_siblings_list: how torch.numa.binding
    # names a physical core, so that plans group cores exactly as torch does.
    core: int
    # The lowest logical CPU sharing its last-level (Unified/Data) cache; None without cache info.
    llc: int | None


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: frozenset[int]
    """CPUs of this node that are online and allowed."""
    listed_cpus: frozenset[int]
    """Online CPUs sysfs lists for this node, allowed or not."""
    distances: Mapping[int, int]

    @property
    def cpuless(self) -> bool:
        """No online CPU: a memory-only node (GPU or CXL memory), or one whose CPUs are offline."""
        return not self.listed_cpus


@dataclass(frozen=True)
class Gpu:
    index: int
    """Position among its vendor's GPUs in PCI-address order: nvidia-smi's and rocm-smi's numbering."""
    pci_address: str
    vendor: str
    numa_node: int | None
    """None where sysfs reports -1 (no affinity known)."""


@dataclass(frozen=True)
class Topology:
    root: str
    online: frozenset[int]
    allowed: frozenset[int]
    """Online CPUs this process may use: the only CPUs any plan may contain."""
    cpus: Mapping[int, Cpu]
    """Details of every allowed CPU."""
    nodes: Mapping[int, NumaNode]
    gpus: tuple[Gpu, ...]

    def gpus_of(self, vendor: str) -> tuple[Gpu, ...]:
        return tuple(gpu for gpu in self.gpus if gpu.vendor == vendor)

    def nodes_with_cpus(self) -> list[int]:
        return sorted(node.id for node in self.nodes.values() if node.cpus)

    def distance(self, source: int, target: int) -> int:
        if source == target:
            return _LOCAL_DISTANCE
        node = self.nodes.get(source)
        if node is None:
            return _REMOTE_DISTANCE
        return node.distances.get(target, _REMOTE_DISTANCE)

    def nearest_node_with_cpus(self, node: int) -> int | None:
        """The node with allowed CPUs closest to ``node`` (ties go to the lower id)."""
        candidates = self.nodes_with_cpus()
        if not candidates:
            return None
        return min(candidates, key=lambda other: (self.distance(node, other), other))

    def socket_of_node(self, node: int) -> int:
        """The package of the node's lowest allowed CPU, as torch.numa.binding decides it."""
        return self.cpus[min(self.nodes[node].cpus)].package

    def sockets(self) -> list[int]:
        return sorted({cpu.package for cpu in self.cpus.values()})

    def group_by_core(self, cpus: Iterable[int]) -> dict[int, frozenset[int]]:
        """Physical core key -> the given CPUs on that core, ordered by key."""
        return _group(cpus, lambda cpu: self.cpus[cpu].core)

    def group_by_llc(self, cpus: Iterable[int]) -> dict[int, frozenset[int]]:
        """Last-level-cache key -> the given CPUs sharing it; the node stands in without cache info."""
        return _group(cpus, lambda cpu: _llc_key(self.cpus[cpu]))

    def physical_core_count(self, cpus: Iterable[int]) -> int:
        return len({self.cpus[cpu].core for cpu in cpus})


def _llc_key(cpu: Cpu) -> int:
    # Without cache info a whole node is one complex; negative keys cannot collide with CPU ids.
    return cpu.llc if cpu.llc is not None else -1 - cpu.node


def _group(cpus: Iterable[int], key_of: Callable[[int], int]) -> dict[int, frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for cpu in cpus:
        groups.setdefault(key_of(cpu), set()).add(cpu)
    return {key: frozenset(groups[key]) for key in sorted(groups)}



def read_topology(
    sysfs_root: str | os.PathLike[str] = DEFAULT_SYSFS_ROOT,
    allowed_cpus: Iterable[int] | str | None = None,
) -> Topology:
    """Read the topology under ``sysfs_root``.

    The CPUs plans may use are the online CPUs intersected with this process's affinity
    mask (which reflects a container's cpuset), whatever the root. ``allowed_cpus``
    overrides the mask: a set of CPUs, or ``"all"`` for every online CPU of the tree (a
    fixture or snapshot describing another machine).
    """
    root = Path(sysfs_root)
    if not root.is_dir():
        raise TopologyError(
            f"sysfs root {str(root)!r} does not exist or is not a directory: "
            "pass the directory that holds devices/system/cpu (default /sys)"
        )
    reader = _SysfsReader(root)
    online = reader.online_cpus()
    allowed = _allowed(root, online, allowed_cpus)
    nodes = reader.nodes(allowed, online)
    node_of_cpu = {cpu: node.id for node in nodes.values() for cpu in node.listed_cpus}
    fallback_node = min(nodes)
    cpus = reader.cpus(allowed, online, node_of_cpu, fallback_node)
    return Topology(
        root=str(root),
        online=online,
        allowed=allowed,
        cpus=cpus,
        nodes=nodes,
        gpus=reader.gpus(),
    )


def planning_cpus(sysfs_root: str | os.PathLike[str], *, applying: bool) -> str | None:
    """The ``allowed_cpus`` to read ``sysfs_root`` with, to plan for the machine it describes.

    The one rule for every planner (launcher, ``torchx topo``, schedulers): a plan that will
    be applied here, or that shows this host (``/sys``), holds only the CPUs this process may
    use, so None: its affinity mask. A plan only shown for another machine's tree (a fixture),
    or made for a snapshot of another host (``snapshot_host``), is for every online CPU of that
    tree, ``ALL_ONLINE``: this process's affinity names CPUs of this host, which mean nothing
    there. (A plan for a snapshot binds its ranks only within this host's CPUs.)
    """
    if is_this_host(sysfs_root) or (applying and snapshot_host(sysfs_root) is None):
        return None
    return ALL_ONLINE


SNAPSHOT_MARK = "torchx_ext-snapshot.json"
"""Written at the root of a tree by ``python -m torchx_ext.numa snapshot``: which host it shows."""


def snapshot_host(sysfs_root: str | os.PathLike[str]) -> str | None:
    """The other host a snapshot tree was taken on; None for a tree that is no snapshot (``/sys``,
    or this host's sysfs mounted elsewhere, as ``/host/sys`` in a container) or one of this host:
    their CPUs are ours."""
    try:
        mark = json.loads((Path(sysfs_root) / SNAPSHOT_MARK).read_text())
    except (OSError, ValueError):
        return None
    host = str(mark.get("host") or "an unnamed host") if isinstance(mark, dict) else None
    return None if host == socket.gethostname() else host


def is_this_host(sysfs_root: str | os.PathLike[str]) -> bool:
    """Whether ``sysfs_root`` is this host's own sysfs (a trailing slash or a link to it counts)."""
    return os.path.realpath(sysfs_root) == os.path.realpath(DEFAULT_SYSFS_ROOT)


def _allowed(
    root: Path, online: frozenset[int], override: Iterable[int] | str | None
) -> frozenset[int]:
    if override == ALL_ONLINE:
        return online
    if isinstance(override, str):
        raise InvalidArgumentError(f"allowed CPUs {override!r}: give a set of CPUs or {ALL_ONLINE!r}")
    if override is not None:
        requested = frozenset(override)
        source = "allowed CPUs"
    else:
        requested = frozenset(os.sched_getaffinity(0))
        source = "this process's CPU affinity"
    allowed = requested & online
    if not allowed:
        hint = "" if override is not None else f", or {ALL_ONLINE!r} to plan for every CPU of {root}"
        raise InvalidArgumentError(
            f"{source} {format_cpulist(requested) or '(empty)'} include no online CPU "
            f"(online: {format_cpulist(online)}): give a non-empty cpulist of online CPUs{hint}"
        )
    return allowed


class _SysfsReader:
    """File access for read_topology; reads each fact once per core or cache, not per CPU."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cpu_dir = root / "devices/system/cpu"
        self.node_dir = root / "devices/system/node"

    def text(self, path: Path | str) -> str | None:
        # os.open/os.read on str paths: a 512-CPU host means ~1000 reads, and io.open plus
        # pathlib would take most of the 20 ms budget.
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            raise TopologyError(f"cannot read {path}: {error.strerror}") from error
        try:
            chunks = []
            while chunk := os.read(descriptor, 65536):
                chunks.append(chunk)
        except OSError as error:
            raise TopologyError(f"cannot read {path}: {error.strerror}") from error
        finally:
            os.close(descriptor)
        return b"".join(chunks).decode(errors="replace")

    def listdir(self, path: Path | str) -> list[str] | None:
        try:
            return os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            raise TopologyError(f"cannot list {path}: {error.strerror}") from error

    def cpulist(self, path: Path | str) -> frozenset[int] | None:
        text = self.text(path)
        if text is None:
            return None
        try:
            return parse_cpulist(text, source=str(path))
        except InvalidArgumentError as error:
            raise TopologyError(str(error)) from error

    def integer(self, path: Path | str) -> int | None:
        text = self.text(path)
        if text is None:
            return None
        try:
            return int(text.strip(), 0)
        except ValueError as error:
            raise TopologyError(f"{path} holds {text.strip()!r}, not an integer") from error

    def online_cpus(self) -> frozenset[int]:
        online = self.cpulist(self.cpu_dir / "online")
        if online is None:
            if not self.cpu_dir.is_dir():
                raise TopologyError(
                    f"{self.cpu_dir} does not exist: is {str(self.root)!r} a sysfs root?"
                )
            # No online file: every cpuN directory whose own online file does not say 0.
            online = frozenset(
                int(name[3:])
                for name in self.listdir(self.cpu_dir) or []
                if name.startswith("cpu")
                and name[3:].isdecimal()
                and (self.text(self.cpu_dir / name / "online") or "1").strip() != "0"
            )
        if not online:
            raise TopologyError(f"{self.cpu_dir} lists no online CPU")
        return online

    def nodes(self, allowed: frozenset[int], online: frozenset[int]) -> dict[int, NumaNode]:
        node_ids = self.cpulist(self.node_dir / "online")
        if node_ids is None:
            node_ids = self.cpulist(self.node_dir / "possible")
        if not node_ids:
            # A kernel built without NUMA support: the whole machine is one node.
            return {0: NumaNode(0, allowed, online, {0: _LOCAL_DISTANCE})}
        ordered = sorted(node_ids)
        listed: dict[int, frozenset[int]] = {}
        for node_id in ordered:
            listed[node_id] = (self.cpulist(self.node_dir / f"node{node_id}/cpulist") or frozenset()) & online
        # CPUs that no node lists (a node's cpulist missing or unreadable) join the lowest
        # node, so that every allowed CPU belongs somewhere.
        orphans = online - frozenset().union(*listed.values())
        if orphans:
            listed[ordered[0]] |= orphans
        return {
            node_id: NumaNode(
                id=node_id,
                cpus=listed[node_id] & allowed,
                listed_cpus=listed[node_id],
                distances=self.distances(self.node_dir / f"node{node_id}/distance", ordered),
            )
            for node_id in ordered
        }

    def distances(self, path: Path, ordered_nodes: list[int]) -> dict[int, int]:
        text = self.text(path)
        if text is None:
            return {}
        try:
            values = [int(value) for value in text.split()]
        except ValueError as error:
            raise TopologyError(f"{path} holds {text.strip()!r}, not distances") from error
        # The kernel writes one distance per online node, in node order.
        return dict(zip(ordered_nodes, values))

    def cpus(
        self,
        allowed: frozenset[int],
        online: frozenset[int],
        node_of_cpu: Mapping[int, int],
        fallback_node: int,
    ) -> dict[int, Cpu]:
        core_of: dict[int, int] = {}
        package_of: dict[int, int] = {}
        llc_of: dict[int, int | None] = {}
        cpu_dir = str(self.cpu_dir)
        for cpu in sorted(allowed):
            topology_dir = f"{cpu_dir}/cpu{cpu}/topology"
            if cpu not in core_of:
                siblings = self.cpulist(f"{topology_dir}/thread_siblings_list")
                package = self.integer(f"{topology_dir}/physical_package_id")
                if siblings is None:
                    siblings = self._siblings_by_core_id(cpu, package, online)
                members = (siblings & allowed) | {cpu}
                for member in members:
                    core_of[member] = min(siblings | {cpu})
                    package_of[member] = package if package is not None else 0
            if cpu not in llc_of:
                shared = self.last_level_cache(cpu)
                if shared is None:
                    llc_of[cpu] = None
                else:
                    for member in (shared & allowed) | {cpu}:
                        llc_of.setdefault(member, min(shared | {cpu}))
        return {
            cpu: Cpu(
                id=cpu,
                node=node_of_cpu.get(cpu, fallback_node),
                package=package_of[cpu],
                core=core_of[cpu],
                llc=llc_of[cpu],
            )
            for cpu in sorted(allowed)
        }

    def _siblings_by_core_id(
        self, cpu: int, package: int | None, online: frozenset[int]
    ) -> frozenset[int]:
        core_id = self.integer(self.cpu_dir / f"cpu{cpu}/topology/core_id")
        if core_id is None:
            return frozenset({cpu})
        siblings = {cpu}
        for other in online:
            other_dir = self.cpu_dir / f"cpu{other}/topology"
            if (
                other != cpu
                and self.integer(other_dir / "core_id") == core_id
                and self.integer(other_dir / "physical_package_id") == package
            ):
                siblings.add(other)
        return frozenset(siblings)

    def last_level_cache(self, cpu: int) -> frozenset[int] | None:
        cache_dir = f"{self.cpu_dir}/cpu{cpu}/cache"
        listing = self.listdir(cache_dir)
        if listing is None:
            return None
        entries = sorted(listing)
        best_level = -1
        shared: frozenset[int] | None = None
        for entry in entries:
            if not (entry.startswith("index") and entry[5:].isdecimal()):
                continue
            index_dir = f"{cache_dir}/{entry}"
            kind = (self.text(f"{index_dir}/type") or "").strip()
            if kind not in ("Unified", "Data"):
                continue
            level = self.integer(f"{index_dir}/level")
            if level is None or level <= best_level:
                continue
            best_level = level
            shared = self.cpulist(f"{index_dir}/shared_cpu_list")
        return shared

    def gpus(self) -> tuple[Gpu, ...]:
        pci_dir = self.root / "bus/pci/devices"
        gpus: list[Gpu] = []
        per_vendor: dict[str, int] = {}
        for address in sorted(self.listdir(pci_dir) or [], key=_pci_sort_key):
            device_dir = pci_dir / address
            device_class = self.integer(device_dir / "class")
            vendor = GPU_VENDORS.get(self.integer(device_dir / "vendor") or 0)
            if device_class is None or vendor is None or device_class >> 16 not in _GPU_CLASSES[vendor]:
                continue
            node = self.integer(device_dir / "numa_node")
            gpus.append(
                Gpu(
                    index=per_vendor.get(vendor, 0),
                    pci_address=address,
                    vendor=vendor,
                    numa_node=None if node is None or node < 0 else node,
                )
            )
            per_vendor[vendor] = per_vendor.get(vendor, 0) + 1
        return tuple(gpus)


def _pci_sort_key(address: str) -> tuple[int, tuple[int, ...], str]:
    # Numeric order, so that a five-digit (VMD) domain sorts after the four-digit ones.
    try:
        domain, bus, slot_function = address.split(":")
        slot, function = slot_function.split(".")
        fields = (int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16))
    except ValueError:
        return (1, (), address)
    return (0, fields, address)

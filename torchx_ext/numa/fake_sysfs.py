"""Write sysfs trees for machines described in a few numbers (torchx_ext.numa.machine.MachineSpec,
re-exported here with the vendor ids for the code that still imports them from this module).

Tests and benchmarks use these trees to exercise read_topology on hardware this host is
not: it cannot tell them from the real thing. The trees hold what the kernel shows, offline
CPUs included: no topology or cache directory for an offline CPU, and sibling, cache and
node lists that leave it out. Also a few PCI devices that are not GPUs, which the reader
must skip. tests/unit/test_machine.py checks that reading a tree gives topology_of(spec).
"""

from __future__ import annotations

import os
from pathlib import Path

from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.machine import AMD as AMD, NVIDIA as NVIDIA, MachineSpec as MachineSpec

_GPU_CLASS = 0x030200  # "3D controller", as data-center GPUs report themselves
_NVSWITCH = ("0000:05:00.0", 0x068000, NVIDIA)  # an NVIDIA bridge: not a GPU
_BMC_VGA = ("0000:02:00.0", 0x030000, 0x1A03)  # a display controller of another vendor
_NIC = ("0000:03:00.0", 0x020000, 0x15B3)


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
        _write_pci_device(path / spec.gpu_pci_address(index), _GPU_CLASS, spec.gpu_vendor, spec.node_id(node))


def _write_pci_device(path: Path, device_class: int, vendor: int, numa_node: int) -> None:
    _write(path / "class", f"0x{device_class:06x}")
    _write(path / "vendor", f"0x{vendor:04x}")
    _write(path / "numa_node", str(numa_node))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")

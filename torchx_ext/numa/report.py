"""Human-readable tables of a Topology and a BindingPlan (the JSON forms live on the types)."""

from __future__ import annotations

from collections.abc import Sequence

from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.plan import BindingPlan
from torchx_ext.numa.topology import Topology


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells
    )


def format_topology(topology: Topology) -> str:
    node_ids = sorted(topology.nodes)
    node_rows = []
    for node_id in node_ids:
        node = topology.nodes[node_id]
        sockets = sorted({topology.cpus[cpu].package for cpu in node.cpus})
        node_rows.append(
            [
                node_id,
                format_cpulist(node.cpus) or "-",
                "none online (memory only?)" if node.cpuless else format_cpulist(node.listed_cpus),
                ",".join(map(str, sockets)) or "-",
                topology.physical_core_count(node.cpus),
                " ".join(str(topology.distance(node_id, other)) for other in node_ids),
            ]
        )
    llc_rows = [
        [key, format_cpulist(cpus), topology.physical_core_count(cpus)]
        for key, cpus in topology.group_by_llc(topology.allowed).items()
    ]
    gpu_rows = [
        [gpu.index, gpu.pci_address, gpu.vendor, "-1 (unknown)" if gpu.numa_node is None else gpu.numa_node]
        for gpu in topology.gpus
    ]
    sections = [
        f"sysfs root: {topology.root}",
        f"online CPUs: {format_cpulist(topology.online)}; allowed: {format_cpulist(topology.allowed)} "
        f"({len(topology.allowed)} CPUs, {topology.physical_core_count(topology.allowed)} physical cores, "
        f"sockets {','.join(map(str, topology.sockets()))})",
        "",
        "NUMA nodes",
        table(["node", "allowed cpus", "all cpus", "socket", "cores", "distances"], node_rows),
        "",
        "last-level caches (allowed CPUs)",
        table(["cache", "cpus", "cores"], llc_rows),
        "",
        "GPUs (PCI order)",
        table(["gpu", "pci address", "vendor", "numa node"], gpu_rows) if gpu_rows else "none",
    ]
    return "\n".join(sections)


def format_plan(plan: BindingPlan) -> str:
    rows = [
        [
            rank.local_rank,
            "-" if rank.gpu is None else f"{rank.gpu} ({rank.gpu_pci_address})",
            "-" if rank.numa_node is None else rank.numa_node,
            rank.threads,
            format_cpulist(rank.cpus),
        ]
        for rank in plan.ranks
    ]
    lines = [
        f"mode: {plan.mode}"
        + (f" (from {plan.requested_mode})" if plan.requested_mode != plan.mode else "")
        + f"; device kind: {plan.device_kind}; {len(plan.ranks)} local ranks",
        table(["local_rank", "gpu", "numa_node", "threads", "cpus"], rows),
    ]
    lines.extend(f"warning: {warning}" for warning in plan.warnings)
    return "\n".join(lines)

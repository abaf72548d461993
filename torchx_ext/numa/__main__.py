"""``python -m torchx_ext.numa show|plan|snapshot``: the topology and the binding plan.

The ``plan --json`` output is a contract other tools script against: keep its keys.
Exit status (torchx_ext.exit_codes): OK, or BAD_INPUT for bad input or an unreadable topology.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from torchx_ext.errors import TorchxExtError
from torchx_ext.exit_codes import BAD_INPUT, OK
from torchx_ext.numa.cpulist import CPULIST_FORMS, parse_cpulist
from torchx_ext.numa.plan import (
    parse_visible_devices,
    plan_binding,
    visible_devices_from_env,
)
from torchx_ext.numa.report import format_plan, format_topology
from torchx_ext.numa.snapshot import snapshot_sysfs
from torchx_ext.numa.topology import ALL_ONLINE, DEFAULT_SYSFS_ROOT, Topology, read_topology
from torchx_ext.options import DEVICE_KINDS, MODES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m torchx_ext.numa",
        description="Show this machine's CPU/NUMA/GPU topology and the CPUs each local rank would be bound to.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def add_topology_flags(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--sysfs-root", default=DEFAULT_SYSFS_ROOT,
            help="sysfs tree to read (default /sys); another root plans for the machine it describes",
        )
        command.add_argument(
            "--allowed-cpus", metavar="LIST",
            help=f"CPUs the job may use: {CPULIST_FORMS}, or 'all' for every online CPU of the tree "
            "(default: this process's affinity, which reflects a container's cpuset)",
        )
        command.add_argument("--json", action="store_true", help="print JSON instead of a table")

    show = commands.add_parser("show", help="print the topology")
    add_topology_flags(show)

    plan = commands.add_parser("plan", help="print the binding plan for one node's local ranks")
    add_topology_flags(plan)
    plan.add_argument("--nproc-per-node", "--nproc_per_node", type=int, required=True, metavar="N")
    plan.add_argument("--mode", default="auto", metavar="MODE", help=f"one of {', '.join(MODES)} (default auto)")
    plan.add_argument(
        "--visible-devices", metavar="LIST",
        help="GPU indices the job sees, as CUDA_VISIBLE_DEVICES (default: CUDA_VISIBLE_DEVICES or "
        "HIP_VISIBLE_DEVICES from the environment, else every GPU)",
    )
    plan.add_argument("--device-kind", default="auto", metavar="KIND", help=f"one of {', '.join(DEVICE_KINDS)}")
    plan.add_argument("--strict", action="store_true", help="fail instead of taking any fallback")

    snapshot = commands.add_parser("snapshot", help="copy this machine's topology files into a fixture tree")
    snapshot.add_argument("destination")
    snapshot.add_argument("--sysfs-root", default=DEFAULT_SYSFS_ROOT)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "snapshot":
            count = snapshot_sysfs(args.destination, args.sysfs_root)
            print(f"copied {count} files from {args.sysfs_root} to {args.destination}")
            return OK
        allowed: frozenset[int] | str | None = args.allowed_cpus
        if args.allowed_cpus not in (None, ALL_ONLINE):
            allowed = parse_cpulist(args.allowed_cpus, source="--allowed-cpus")
        topology = read_topology(args.sysfs_root, allowed)
        if args.command == "show":
            print(json.dumps(_topology_json(topology), indent=2) if args.json else format_topology(topology))
            return OK
        visible = (
            visible_devices_from_env(os.environ)
            if args.visible_devices is None
            else parse_visible_devices(args.visible_devices, source="--visible-devices")
        )
        plan = plan_binding(
            topology,
            args.nproc_per_node,
            mode=args.mode,
            visible_devices=visible,
            device_kind=args.device_kind,
            strict=args.strict,
        )
    except TorchxExtError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT
    print(json.dumps(plan.to_json(), indent=2) if args.json else format_plan(plan))
    return OK


def _topology_json(topology: Topology) -> dict[str, object]:
    return {
        "online": sorted(topology.online),
        "allowed": sorted(topology.allowed),
        "nodes": [
            {
                "id": node.id,
                "cpus": sorted(node.cpus),
                "has_online_cpus": not node.cpuless,
                "distances": {str(other): value for other, value in sorted(node.distances.items())},
            }
            for node in topology.nodes.values()
        ],
        "cpus": [
            {"id": cpu.id, "node": cpu.node, "socket": cpu.package, "core": cpu.core, "llc": cpu.llc}
            for cpu in topology.cpus.values()
        ],
        "gpus": [
            {"index": gpu.index, "pci_address": gpu.pci_address, "vendor": gpu.vendor, "numa_node": gpu.numa_node}
            for gpu in topology.gpus
        ],
    }


if __name__ == "__main__":
    sys.exit(main())

"""``torchx topo``: this host's topology (or a named resource's) and the plan a job would get.

    torchx topo -j 2x4 --numa_binding exclusive           # on this host
    torchx topo -j 1x8 -h dgx_h100 --numa_binding node --json

No torch import: the torchx CLI loads every subcommand on every call.
"""

import argparse
import json

from torchx.cli.cmd_base import SubCommand

from torchx_ext.cli.one_line import one_line_errors
from torchx_ext.errors import InvalidArgumentError


class CmdTopo(SubCommand):
    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        # -h names a host, as in `torchx run dist.ddp -h`; --help still prints help. argparse
        # only lets a later option take over -h when every container resolves conflicts.
        for container in [subparser, *subparser._action_groups]:
            container.conflict_handler = "resolve"
        subparser.add_argument("-j", default="1x2", help="[MIN:]NODESxPROCS, as for dist.ddp (default 1x2)")
        subparser.add_argument("--numa_binding", "--numa-binding", default="auto", help="binding mode (default auto)")
        subparser.add_argument("-h", dest="host", default=None, help="a named resource to plan for (default: this host)")
        subparser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> None:
        with one_line_errors():
            document, text = describe(args.j, args.numa_binding, args.host)
            print(json.dumps(document, indent=2) if args.json else text, flush=True)


def describe(j: str, numa_binding: str, host_name: str | None) -> tuple[dict[str, object], str]:
    """The per-replica plan for a ``-j`` job on this host or on ``host_name``, as JSON and text."""
    # Imported here: the torchx CLI loads this module for every command, not only for topo.
    import logging
    import os

    from torchx_ext.components.dist import parse_j
    from torchx_ext.launcher.worker_binding import plan_workers
    from torchx_ext.numa.machine import topology_of
    from torchx_ext.numa.report import format_plan, format_topology
    from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT, planning_cpus, read_topology
    from torchx_ext.resources import host
    from torchx_ext.schedulers.placement import slice_host

    min_nodes, max_nodes, nproc = parse_j(j)
    env: dict[str, str] | None = None  # this host: CUDA_VISIBLE_DEVICES counts, as for the launcher
    if host_name is None:
        topology = read_topology(DEFAULT_SYSFS_ROOT, planning_cpus(DEFAULT_SYSFS_ROOT, applying=False))
    else:
        machine = host(host_name).machine
        gpus = len(machine.gpu_nodes)
        if gpus and nproc > gpus:
            raise InvalidArgumentError(
                f"{nproc} processes per node but {host_name} has {gpus} GPUs (dist.ddp refuses this -j too)"
            )
        # Planned from its description, every CPU of it allowed: nothing of this host applies
        # to another machine, its visible-device settings included.
        topology, env = topology_of(machine, f"none (named resource {host_name}, described)"), {}
    # Replicas of a job on this host share it as local_cwd runs them: each launcher plans
    # within its replica's slice. On a named host each replica has a machine of its own.
    slices = slice_host(topology, max_nodes) if host_name is None and max_nodes > 1 else []
    # The table below says what the launcher's INFO lines would; its warnings still show.
    launcher_log = logging.getLogger("torchx_ext.launcher")
    level = launcher_log.level
    launcher_log.setLevel(logging.WARNING)
    try:
        if not slices:
            plans = [plan_workers(nproc, numa_binding, topology=topology, dry_run=True, env=env)[0]] * max_nodes
        else:
            plans = []
            for piece in slices:
                piece_env = dict(os.environ)
                if piece.gpus and "CUDA_VISIBLE_DEVICES" not in os.environ:
                    piece_env["CUDA_VISIBLE_DEVICES"] = piece.cuda_visible_devices
                # The slice's CPUs are what the replica's launcher sees as its own.
                plan, _ = plan_workers(nproc, numa_binding, allowed_cpus=piece.cpus, dry_run=True, env=piece_env)
                plans.append(plan)
    finally:
        launcher_log.setLevel(level)
    where = host_name or "this host"
    nodes = str(max_nodes) if min_nodes == max_nodes else f"{min_nodes}:{max_nodes}"
    replicas: list[dict[str, object]] = []
    lines = [format_topology(topology), ""]
    if slices:
        lines.append(f"{where}: {nodes} replicas x {nproc} processes, sharing this host as on local_cwd "
                     "(each replica's launcher plans within its slice):")
        for piece, plan in zip(slices, plans):
            replicas.append({"replica": piece.replica_id, "slice_cpus": sorted(piece.cpus),
                             "slice_numa_nodes": list(piece.numa_nodes), "slice_gpus": list(piece.gpus), **plan.to_json()})
            lines += ["", f"slice {piece.describe()}", format_plan(plan)]
    else:
        lines += [f"{where}: {nodes} node(s) x {nproc} processes; the plan of each replica's launcher:", format_plan(plans[0])]
        replicas = [{"replica": replica, **plans[0].to_json()} for replica in range(max_nodes)]
    document: dict[str, object] = {
        "host": where, "nnodes": nodes, "nproc_per_node": nproc, **plans[0].to_json(), "replicas": replicas,
    }
    return document, "\n".join(lines)


__all__ = ["CmdTopo", "describe"]

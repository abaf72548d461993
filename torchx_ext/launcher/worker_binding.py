"""Agent side of the binding: plan this node's workers once, log it, check it applies here.

Every worker gets the same encoded plan (bootstrap.encode_plan) and picks its own entry by
local rank before any user code runs. No torch import.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from torchx_ext.launcher.bootstrap import WorkerBinding
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.plan import BindingPlan, describe_rank, plan_binding, visible_devices_from_env
from torchx_ext.options import check_mode, parse_omp_threads
from torchx_ext.numa.topology import ALL_ONLINE, DEFAULT_SYSFS_ROOT, read_topology

logger = logging.getLogger("torchx_ext.launcher")

def plan_workers(
    nproc_per_node: int,
    mode: str,
    *,
    strict: bool = False,
    device_kind: str = "auto",
    omp_threads: str | int | None = None,
    sysfs_root: str = DEFAULT_SYSFS_ROOT,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
) -> tuple[BindingPlan, list[WorkerBinding]]:
    """Plan this node's workers and log the plan.

    The plan only holds CPUs this process may use (read_topology intersects every sysfs
    root with its affinity), except in a dry run for another machine's tree, which plans
    for all of that tree's CPUs and applies nothing.

    ``device_kind`` ``auto`` plans GPU ranks only when there are at least as many visible
    GPUs as ranks; otherwise ranks are CPU-only (a gloo job on a GPU host stays legal).
    """
    environ = os.environ if env is None else env
    check_mode(mode)
    omp = parse_omp_threads(omp_threads)
    # A dry run for another machine's tree plans for all of its CPUs, not this process's.
    plan_all = dry_run and os.path.realpath(sysfs_root) != os.path.realpath(DEFAULT_SYSFS_ROOT)
    topology = read_topology(sysfs_root, ALL_ONLINE if plan_all else None)
    visible = visible_devices_from_env(environ)
    if device_kind == "auto":
        gpu_count = len(topology.gpus) if visible is None else len(visible)
        device_kind = "gpu" if 0 < nproc_per_node <= gpu_count else "cpu"
    plan = plan_binding(
        topology, nproc_per_node, mode, visible_devices=visible, device_kind=device_kind, strict=strict
    )
    user_omp = "OMP_NUM_THREADS" in environ
    bindings = []
    for rank in plan.ranks:
        threads: int | None = None
        if not user_omp and omp == "auto":
            # In mode none every rank sees every core: split them rather than oversubscribe.
            threads = rank.threads if plan.mode != "none" else max(1, rank.threads // nproc_per_node)
        elif not user_omp and isinstance(omp, int):
            threads = omp
        apply = plan.mode != "none" and not dry_run
        bindings.append(
            WorkerBinding(format_cpulist(rank.cpus) if apply else None, rank.numa_node if apply else None, threads)
        )
    _log(plan, bindings, dry_run, user_omp and omp is not None)
    return plan, bindings


def _log(plan: BindingPlan, bindings: list[WorkerBinding], dry_run: bool, omp_overridden: bool) -> None:
    suffix = " (dry run: not applied)" if dry_run else ""
    logger.info(
        "NUMA binding %s%s, device kind %s, %d local ranks%s",
        plan.mode,
        f" (from {plan.requested_mode})" if plan.mode != plan.requested_mode else "",
        plan.device_kind,
        len(plan.ranks),
        suffix,
    )
    for rank, binding in zip(plan.ranks, bindings):
        omp = f" OMP_NUM_THREADS={binding.omp_threads}" if binding.omp_threads is not None else ""
        logger.info("%s%s", describe_rank(rank), omp)
    if omp_overridden:
        logger.info("OMP_NUM_THREADS=%s was exported by the user and is kept", os.environ.get("OMP_NUM_THREADS"))
    for warning in plan.warnings:
        logger.warning("NUMA binding fallback: %s", warning)

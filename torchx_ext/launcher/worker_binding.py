"""Agent side of the binding: plan this node's workers once, log it, check it applies here.

Every worker gets the same encoded plan (bootstrap.encode_plan) and picks its own entry by
local rank before any user code runs. No torch import.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from torchx_ext.errors import InvalidArgumentError, TorchxExtError
from torchx_ext.launcher.bootstrap import WorkerBinding
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.plan import BindingPlan, RankBinding, describe_rank, plan_binding, visible_devices_from_env
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT, Topology, planning_cpus, read_topology, snapshot_host
from torchx_ext.options import check_mode, parse_omp_threads

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
    allowed_cpus: Iterable[int] | None = None,
    topology: Topology | None = None,
) -> tuple[BindingPlan, list[WorkerBinding]]:
    """Plan this node's workers and log the plan.

    The plan only holds CPUs this process may use (read_topology intersects every sysfs
    root with its affinity), except in a dry run for another machine's tree, which plans
    for all of that tree's CPUs and applies nothing (topology.planning_cpus states the rule).
    ``allowed_cpus`` plans for those CPUs instead (a replica's slice of this host: the
    caller's own affinity stays as it is); applied, they must be CPUs this process may use.
    ``topology`` plans on a Topology the caller has (a described machine) instead of reading
    ``sysfs_root``; it already holds its allowed CPUs, so it takes no ``allowed_cpus``.

    A snapshot of another host (``python -m torchx_ext.numa snapshot``) is planned for all of its
    CPUs, applied or not; applied, each rank binds within the CPUs of its plan that exist here.

    ``device_kind`` ``auto`` plans GPU ranks only when there are at least as many visible
    GPUs as ranks; otherwise ranks are CPU-only (a gloo job on a GPU host stays legal).
    """
    environ = os.environ if env is None else env
    check_mode(mode)
    omp = parse_omp_threads(omp_threads)
    allowed = None if allowed_cpus is None else frozenset(allowed_cpus)
    if topology is not None and allowed is not None:
        raise InvalidArgumentError(
            "plan_workers takes topology or allowed_cpus, not both: a Topology already holds its allowed CPUs"
        )
    try:
        if topology is None:
            override = planning_cpus(sysfs_root, applying=not dry_run) if allowed is None else allowed
            plan = _plan(nproc_per_node, mode, strict, device_kind, read_topology(sysfs_root, override), environ)
        else:
            plan = _plan(nproc_per_node, mode, strict, device_kind, topology, environ)
    except TorchxExtError as error:
        if mode not in ("none", "auto"):
            raise
        # No binding was asked for (or only "if useful"): an unreadable sysfs or a GPU list we
        # cannot map (UUIDs, MIG) must not stop a job torchrun would run.
        logger.warning("NUMA binding off: %s", error)
        plan = _unbound_plan(nproc_per_node, mode, _unbound_cpus(topology, allowed))
    user_omp = "OMP_NUM_THREADS" in environ
    snapshot = snapshot_host(sysfs_root) if topology is None and allowed is None and not dry_run else None
    here = frozenset(os.sched_getaffinity(0))
    bindings = []
    for rank in plan.ranks:
        threads: int | None = None
        if not user_omp and omp == "auto":
            # In mode none every rank sees every core: split them rather than oversubscribe.
            threads = rank.threads if plan.mode != "none" else max(1, rank.threads // nproc_per_node)
        elif not user_omp and isinstance(omp, int):
            threads = omp
        # In mode none the rank's CPUs are all it may use: binding to them changes nothing,
        # and the worker still learns them through TORCHX_EXT_CPUS.
        if snapshot is not None:
            # Planned for another host's CPUs: bind within those that exist here (none: all of
            # ours), no more threads than those, and leave memory alone (its NUMA nodes need not
            # exist here).
            bound = rank.cpus & here or here
            bindings.append(WorkerBinding(format_cpulist(bound), None, None if threads is None else
                                          max(1, min(threads, len(bound)))))
            continue
        bindings.append(
            WorkerBinding(None if dry_run else format_cpulist(rank.cpus), None if dry_run else rank.numa_node, threads)
        )
    if snapshot is not None:
        logger.warning("planned for a snapshot of %s (%s), not for this host: each rank binds only within the "
                       "CPUs of its plan that exist here, else within this process's CPUs %s", snapshot, sysfs_root,
                       format_cpulist(here))
    _log(plan, bindings, dry_run, user_omp and omp is not None, environ)
    return plan, bindings


def _plan(
    nproc: int, mode: str, strict: bool, device_kind: str, topology: Topology, environ: Mapping[str, str]
) -> BindingPlan:
    visible = visible_devices_from_env(environ)
    if device_kind == "auto":
        gpu_count = len(topology.gpus) if visible is None else len(visible)
        device_kind = "gpu" if 0 < nproc <= gpu_count else "cpu"
    return plan_binding(topology, nproc, mode, visible_devices=visible, device_kind=device_kind, strict=strict)


def _unbound_cpus(given: Topology | None, allowed: frozenset[int] | None) -> frozenset[int]:
    # Without a plan every rank may use all the CPUs the caller planned for: its slice, the
    # described machine's, or else this process's own.
    if allowed is not None:
        return allowed
    if given is not None:
        return given.allowed
    return frozenset(os.sched_getaffinity(0))


def _unbound_plan(nproc: int, mode: str, cpus: frozenset[int]) -> BindingPlan:
    ranks = tuple(RankBinding(rank, cpus, None, None, None, len(cpus)) for rank in range(nproc))
    return BindingPlan(mode="none", requested_mode=mode, device_kind="cpu", ranks=ranks)


def _log(
    plan: BindingPlan, bindings: list[WorkerBinding], dry_run: bool, omp_overridden: bool, environ: Mapping[str, str]
) -> None:
    suffix = " (dry run: not applied)" if dry_run else ""
    logger.info(
        "NUMA binding %s%s, device kind %s, %d local ranks%s",
        plan.mode,
        f" (from {plan.requested_mode})" if plan.mode != plan.requested_mode else "",
        plan.device_kind,
        len(plan.ranks),
        suffix,
    )
    # Without a value of the plan's the worker inherits the launcher's: the user's, torchrun's
    # default of 1 (exported before the plan is made), or none, and then OpenMP's own.
    inherited = environ.get("OMP_NUM_THREADS") or "unset"
    for rank, binding in zip(plan.ranks, bindings):
        threads = inherited if binding.omp_threads is None else str(binding.omp_threads)
        logger.info("%s", describe_rank(rank, threads))
    if omp_overridden:
        logger.info("OMP_NUM_THREADS=%s was exported by the user and is kept", environ.get("OMP_NUM_THREADS"))
    for warning in plan.warnings:
        logger.warning("NUMA binding fallback: %s", warning)

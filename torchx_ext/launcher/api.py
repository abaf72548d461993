"""``launch(fn, *args, ...)``: run a callable on every local rank, bound like the CLI's workers.

In the spirit of ``elastic_launch(LaunchConfig, fn)(*args)``: it uses
``torch.distributed.launcher.api.LaunchConfig`` and ``elastic_launch`` (public since torch
1.9), takes their rendezvous and log settings, adds NUMA binding, and returns
``{global rank: return value}``.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from torchx_ext.errors import InvalidArgumentError, WorkerFailedError
from torchx_ext.launcher import preload_server
from torchx_ext.launcher.bootstrap import BoundCallable, encode_plan
from torchx_ext.launcher.caller_state import caller_state_kept
from torchx_ext.launcher.scratch import log_dir_of_launch
from torchx_ext.launcher.rendezvous.worker_store import use_fresh_store_per_attempt_if_needed
from torchx_ext.launcher.inputs import StdSpec, check_rdzv_backend, std_spec
from torchx_ext.launcher.worker_binding import plan_workers
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT
from torchx_ext.error_file import read_error_file

__all__ = ["launch", "WorkerFailedError"]  # WorkerFailedError lived here first: still importable from here

START_METHODS = ("spawn", "fork", "forkserver")


def launch(
    fn: Callable[..., Any],
    *args: Any,
    nproc_per_node: int = 1,
    numa_binding: str = "auto",
    numa_strict: bool = False,
    omp_threads: str | int | None = None,
    start_method: str = "spawn",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    nnodes: int = 1,
    rdzv_backend: str = "c10d",
    rdzv_endpoint: str = "localhost:0",
    rdzv_configs: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    redirects: StdSpec = "0",
    tee: StdSpec = "0",
    device_kind: str = "auto",
    sysfs_root: str = DEFAULT_SYSFS_ROOT,
    numa_dry_run: bool = False,
    shutdown_timeout: int = 5,
) -> dict[int, Any]:
    """Run ``fn(*args)`` in ``nproc_per_node`` worker processes and return their results.

    Each worker is bound (``numa_binding``, as ``--numa-binding``) before ``fn`` is loaded,
    under every start method. The rendezvous and log settings mean what they mean for
    ``LaunchConfig`` and torchrun: ``rdzv_configs`` as ``--rdzv-conf`` (the ``static``
    backend reads this node's ``rank`` there; 0 when ``nnodes`` is 1), ``log_dir``,
    ``redirects`` and ``tee`` as ``--log-dir``, ``--redirects`` and ``--tee``. Every value
    is checked before anything starts (InvalidArgumentError). Raises WorkerFailedError for a
    worker that fails after ``max_restarts``. The caller's environment and signal handlers
    are as they were when it returns.
    """
    if start_method not in START_METHODS:
        raise InvalidArgumentError(
            f"unknown start_method {start_method!r}: valid values are {', '.join(START_METHODS)}"
        )
    for what, number, least in (("nnodes", nnodes, 1), ("nproc_per_node", nproc_per_node, 1), ("max_restarts", max_restarts, 0)):
        if isinstance(number, bool) or not isinstance(number, int) or number < least:
            raise InvalidArgumentError(f"invalid {what} {number!r}: expected an integer of at least {least}")
    check_rdzv_backend(rdzv_backend, "rdzv_backend")
    configs = _rdzv_configs(rdzv_configs, rdzv_backend, nnodes)
    redirect_spec, tee_spec = std_spec(redirects, "redirects"), std_spec(tee, "tee")
    _, bindings = plan_workers(
        nproc_per_node,
        numa_binding,
        strict=numa_strict,
        device_kind=device_kind,
        omp_threads=omp_threads,
        sysfs_root=sysfs_root,
        dry_run=numa_dry_run,
    )
    with log_dir_of_launch(None if log_dir is None else os.fspath(log_dir), redirect_spec) as directory:
        logs_specs = _logs_specs(directory, redirect_spec, tee_spec)  # last: it creates log_dir
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        config = LaunchConfig(
            min_nodes=nnodes,
            max_nodes=nnodes,
            nproc_per_node=nproc_per_node,
            run_id=run_id or str(uuid.uuid4()),
            rdzv_backend=rdzv_backend,
            rdzv_endpoint=rdzv_endpoint,
            rdzv_configs=configs,
            max_restarts=max_restarts,
            monitor_interval=monitor_interval,
            start_method=start_method,
            logs_specs=logs_specs,
        )
        config.numa_options = None  # ours replaces torch's: applied once, not twice
        config.shutdown_timeout = shutdown_timeout  # set after construction: older torch lacks the field
        entrypoint = BoundCallable(
            encode_plan(bindings),
            fn,
            args,
            pickled=start_method != "fork",
            bind_spawn_parent=start_method == "spawn",
        )
        caller_cpus = os.sched_getaffinity(0)
        if start_method == "forkserver":
            # A forkserver is the caller's to keep (it may be warm with their preloads); only one
            # recorded by the process we were forked from is useless here.
            preload_server.forget_inherited()
        with caller_state_kept():
            use_fresh_store_per_attempt_if_needed(config)
            try:
                results: dict[int, Any] = elastic_launch(config, entrypoint)("${local_rank}")
            except ChildFailedError as error:
                rank, failure = error.get_first_failure()
                raise WorkerFailedError(
                    rank=rank,
                    local_rank=failure.local_rank,
                    exitcode=failure.exitcode,
                    traceback=_traceback_of(failure),
                    summary=error.format_msg(),
                ) from error
            finally:
                os.sched_setaffinity(0, caller_cpus)  # spawning bound this thread child by child
                gc.collect()  # the rendezvous' store server goes here, not in a child forked later (cli.main)
    return results


def _rdzv_configs(configs: Mapping[str, Any] | None, backend: str, nnodes: int) -> dict[str, Any]:
    # A copy: LaunchConfig writes its default timeout into the dict it is given.
    result = dict(configs or {})
    if not all(isinstance(key, str) for key in result):
        raise InvalidArgumentError(
            f"invalid rdzv_configs {configs!r}: expected a dict of option names to values, "
            "e.g. {'join_timeout': 60} or {'rank': 0} for the static backend"
        )
    if backend == "static" and "rank" not in result:
        if nnodes != 1:
            raise InvalidArgumentError(
                f"rdzv_backend 'static' with nnodes={nnodes} needs this node's rank: "
                f"rdzv_configs={{'rank': N}} with N in 0..{nnodes - 1}"
            )
        result["rank"] = 0  # torchrun's --node-rank default; the only rank of a one-node job
    return result


def _logs_specs(log_dir: str | os.PathLike[str] | None, redirects: Any, tee: Any) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

    directory = None if log_dir is None else os.fspath(log_dir)
    if directory is not None and os.path.exists(directory) and not os.path.isdir(directory):
        raise InvalidArgumentError(f"invalid log_dir {directory!r}: it is a file; expected a directory (created if missing)")
    try:
        return DefaultLogsSpecs(log_dir=directory, redirects=redirects, tee=tee)
    except OSError as error:
        raise InvalidArgumentError(f"invalid log_dir {directory!r}: {error.strerror or error}") from error


def _traceback_of(failure: Any) -> str:
    report = read_error_file(failure.error_file)
    if report is not None and (report.traceback or report.message):
        return report.traceback or report.message
    return str(getattr(failure, "message", "")) or "(no traceback: the worker exited without raising)"

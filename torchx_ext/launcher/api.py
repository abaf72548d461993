"""``launch(fn, *args, ...)``: run a callable on every local rank, bound like the CLI's workers.

In the spirit of ``elastic_launch(LaunchConfig, fn)(*args)``: it uses
``torch.distributed.launcher.api.LaunchConfig`` and ``elastic_launch`` (public since torch
1.9), adds NUMA binding, and returns ``{global rank: return value}``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from torchx_ext.errors import InvalidArgumentError, WorkerFailedError
from torchx_ext.launcher.bootstrap import BoundCallable, encode_plan
from torchx_ext.launcher.cli import FRESH_STORE_PER_ATTEMPT_ENV, needs_fresh_store_per_attempt
from torchx_ext.launcher.worker_binding import plan_workers
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT
from torchx_ext.schedulers.common.error_file import read_error_file

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
    run_id: str | None = None,
    device_kind: str = "auto",
    sysfs_root: str = DEFAULT_SYSFS_ROOT,
    numa_dry_run: bool = False,
    shutdown_timeout: int = 5,
) -> dict[int, Any]:
    """Run ``fn(*args)`` in ``nproc_per_node`` worker processes and return their results.

    Each worker is bound (``numa_binding``, as ``--numa-binding``) before ``fn`` is loaded,
    under every start method. Raises WorkerFailedError for a worker that fails.
    """
    if start_method not in START_METHODS:
        raise InvalidArgumentError(
            f"unknown start_method {start_method!r}: valid values are {', '.join(START_METHODS)}"
        )
    _, bindings = plan_workers(
        nproc_per_node,
        numa_binding,
        strict=numa_strict,
        device_kind=device_kind,
        omp_threads=omp_threads,
        sysfs_root=sysfs_root,
        dry_run=numa_dry_run,
    )
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=nnodes,
        max_nodes=nnodes,
        nproc_per_node=nproc_per_node,
        run_id=run_id or str(uuid.uuid4()),
        rdzv_backend=rdzv_backend,
        rdzv_endpoint=rdzv_endpoint,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method=start_method,
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
    name, value = FRESH_STORE_PER_ATTEMPT_ENV
    previous = os.environ.get(name)
    if needs_fresh_store_per_attempt(config):
        os.environ.setdefault(name, value)
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
        if previous is None:
            os.environ.pop(name, None)
    return results


def _traceback_of(failure: Any) -> str:
    report = read_error_file(failure.error_file)
    if report is not None and (report.traceback or report.message):
        return report.traceback or report.message
    return str(getattr(failure, "message", "")) or "(no traceback: the worker exited without raising)"

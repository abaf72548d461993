"""``python -m torchx_ext.launcher`` / ``torchx-ext-run``: torchrun plus NUMA binding.

torchrun's own parser (``torch.distributed.run.get_args_parser``) and config builder
(``config_from_args``) supply every torchrun flag with torchrun's meaning and spelling; this
module adds the NUMA and rendezvous-from-env flags, checks input before any worker starts,
and replaces the worker command with the binding bootstrap.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import logging
import os
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import util as multiprocessing_util
from typing import Any

from torchx_ext.errors import BindingFallbackError, InvalidArgumentError, TorchxExtError, first_line
from torchx_ext.escaping import escape_template
from torchx_ext.exit_codes import BAD_INPUT, FAILED, OK, STUCK
from torchx_ext.launcher import preload_server
from torchx_ext.launcher.bootstrap import BOOTSTRAP_CODE, BoundCallable, encode_plan, run_preloaded, run_script_path
from torchx_ext.launcher.caller_state import caller_state_kept
from torchx_ext.launcher.rendezvous.clock_offset import CLOCK_OFFSET_ENV, apply_clock_offset, clock_offset_s
from torchx_ext.launcher.scratch import log_dir_of_launch
from torchx_ext.launcher.streams import lock_standard_streams
from torchx_ext.launcher.open_files import raise_open_files_limit
from torchx_ext.launcher.rendezvous.worker_store import use_fresh_store_per_attempt_if_needed
from torchx_ext.launcher.rendezvous.spare import SpareReleased
from torchx_ext.launcher.rendezvous.store_reach import reach_store
from torchx_ext.launcher.rendezvous.config import peer_timeout, watch_rendezvous
from torchx_ext.launcher.rendezvous.errors import HangError, PeerLostError, StuckError
from torchx_ext.launcher.rendezvous.loopback import is_loopback
from torchx_ext.launcher.rendezvous.settings import BACKEND as WATCHED_BACKEND
from torchx_ext.launcher.rendezvous.settings import HANDLERS as C10D_HANDLERS
from torchx_ext.launcher.rendezvous.store_loss import closed_store_line, exit_for_store_loss
from torchx_ext.launcher.rendezvous.watchdog import DEFAULT_TIMEOUT_S, Loss
from torchx_ext.options import DEFAULT_HANG_TIMEOUT_S, parse_hang_timeout
from torchx_ext.launcher.hang_watch import LaunchProgress
from torchx_ext.launcher.stacks import answer_for, answer_requests
from torchx_ext.launcher.step_timer import served_timer
from torchx_ext.launcher.bootstrap import PROGRESS_DIR_ENV
from torchx_ext.launcher.liveness import mark_running, start_touching
from torchx_ext.launcher.bootstrap import LAUNCHER_PID_ENV
from torchx_ext.launcher.inputs import check_rdzv_backend, local_world_size, privateuse1_name, std_spec
from torchx_ext.launcher.worker_binding import plan_workers
from torchx_ext.options import OMP_THREADS_FORMS, check_mode
from torchx_ext.options import DEVICE_KINDS, MODES
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT
from torchx_ext.ft import DEFAULT_LIGHTHOUSE_PORT, GROUP_ID_ENV, LIGHTHOUSE_ENV, ending_port
from torchx_ext.ft import INSTALL_HINT as FT_INSTALL_HINT
from torchx_ext.ft.ending import check_the_lighthouse, wait_for_the_end
from torchx_ext.launcher.rendezvous.store_address import C10D_DEFAULT_PORT
from torchx_ext.error_file import ErrorReport, read_error_file, write_error_file
from torchx_ext.replica_env import (ALLOCATED_NODES_ENV, ERROR_FILE_ENV, LIVENESS_FILE_ENV, RDZV_HOST_ENV,
                                    RDZV_IS_HOST_ENV, RDZV_PORT_ENV)

logger = logging.getLogger("torchx_ext.launcher")

DEFAULT_RDZV_PORT = 29500
STORE_CONNECT_TIMEOUT_S = 60.0
"""torch's c10d backend's ``read_timeout`` default: its store client's connect timeout too."""
WORKER_STARTS = ("preloaded", "fresh")
# torch waits 30 s by default before SIGKILL; a stopped job should be gone well within 10 s.
DEFAULT_SHUTDOWN_TIMEOUT_S = 5


def build_parser() -> argparse.ArgumentParser:
    from torch.distributed.argparse_util import env
    from torch.distributed.run import get_args_parser

    parser = argparse.ArgumentParser(
        prog="torchx-ext-run",
        description="torchrun with NUMA binding: every worker starts on the CPUs near its GPU "
        "(or its share of the NUMA nodes for CPU-only jobs).",
        parents=[get_args_parser()],
        conflict_handler="resolve",
    )
    parser.add_argument(
        "--numa-binding", "--numa_binding", default="none", metavar="MODE",
        help=f"one of {', '.join(MODES)} (default none, as torchrun)",
    )
    parser.add_argument(
        "--numa-strict", "--numa_strict", action="store_true",
        help="fail before starting workers if the plan needs any fallback",
    )
    parser.add_argument(
        "--numa-dry-run", "--numa_dry_run", action="store_true",
        help="plan and log the binding but do not apply it",
    )
    parser.add_argument(
        "--numa-sysfs-root", "--numa_sysfs_root", action=env, default=DEFAULT_SYSFS_ROOT, metavar="DIR",
        help="read the topology from this sysfs tree, or $PET_NUMA_SYSFS_ROOT (another machine's: use with "
        "--numa-dry-run; a snapshot of another host's is planned for that host's CPUs, and applied within ours)",
    )
    parser.add_argument(
        "--numa-device-kind", "--numa_device_kind", action=env, default=None, metavar="KIND",
        help="plan GPU ranks (gpu) or CPU-only ranks (cpu), or $PET_NUMA_DEVICE_KIND; default: from "
        "--nproc-per-node gpu|cpu, else gpu when torch has CUDA/ROCm and enough GPUs are visible",
    )
    parser.add_argument(
        "--rdzv-endpoint-env", "--rdzv_endpoint_env", metavar="NAME",
        help="take the rendezvous host from environment variable NAME (localhost when unset or "
        f"empty) and the port from ${RDZV_PORT_ENV} (set by schedulers that share a host) or --rdzv-port",
    )
    parser.add_argument(
        "--rdzv-port", "--rdzv_port", type=int, default=DEFAULT_RDZV_PORT, metavar="PORT",
        help=f"rendezvous port used with --rdzv-endpoint-env (default {DEFAULT_RDZV_PORT})",
    )
    parser.add_argument(
        "--worker-start", "--worker_start", choices=WORKER_STARTS, default="preloaded",
        help="how script and module workers start: preloaded (default) forks them from a server that "
        "imported torch while the launcher started; fresh starts a new interpreter per worker, as torchrun does",
    )
    parser.add_argument(
        "--peer-timeout", "--peer_timeout", default=None, metavar="SECONDS",
        help="while workers run, a peer node (or the rendezvous store) silent this long is lost: the "
        "workers stop and rendezvous again within --max-restarts, or the launcher exits naming it "
        f"(c10d, 2 nodes or more; default {DEFAULT_TIMEOUT_S:g}, or the --rdzv-conf key peer_timeout; 0: off)",
    )
    parser.add_argument(
        # --hot-spares: what dist.* passed before this flag took the CLI's --spares spelling.
        "--spares", "--hot-spares", "--hot_spares", dest="spares", default=0, type=_spares, metavar="N",
        help="the job runs N launchers beyond --nnodes (c10d): those a full round leaves out wait as hot "
        "spares and take a lost node's place; one whose first join finds the rendezvous closed (the job's "
        "nodes are done) exits 0. Default 0",
    )
    parser.add_argument(
        "--c10d-handler", "--c10d_handler", action=env, default=C10D_HANDLERS[0], metavar="|".join(C10D_HANDLERS),
        help="which c10d rendezvous runs, or $PET_C10D_HANDLER: arrivals (default; each node's join costs a "
        "constant number of store operations at any --nnodes) or torch (torch's dynamic handler, as torchrun)",
    )
    parser.add_argument(
        "--hang-timeout", "--hang_timeout", action=env, default=None, metavar="SECONDS|off",
        help="a job none of whose ranks moved (its main thread's Python stack) for this long hangs: every "
        "rank's stack goes to the log, then the workers stop and rendezvous again within --max-restarts, "
        f"or $PET_HANG_TIMEOUT (c10d; default {DEFAULT_HANG_TIMEOUT_S:g}; off: no watchdog)",
    )
    parser.add_argument(
        "--omp-threads", "--omp_threads", metavar="auto|N",
        help=f"OMP_NUM_THREADS for each worker: {OMP_THREADS_FORMS}; auto is the rank's physical "
        "cores from the plan. A value exported by the user wins. Default: torchrun's (1 when nproc > 1)",
    )
    parser.add_argument(
        "--torchft-lighthouse-env", "--torchft_lighthouse_env", metavar="NAME",
        help=f"a torchft replica group (dist.hsdp): the workers get ${LIGHTHOUSE_ENV}=http://HOST:PORT with HOST "
        "from environment variable NAME (the scheduler's rank-0 host: the lighthouse role's), unless it is set; "
        "once they all succeeded, the launcher waits until the lighthouse says every group is done",
    )
    parser.add_argument(
        "--torchft-lighthouse-port", "--torchft_lighthouse_port", type=int, default=DEFAULT_LIGHTHOUSE_PORT,
        metavar="PORT", help=f"the lighthouse's port with --torchft-lighthouse-env (default {DEFAULT_LIGHTHOUSE_PORT})",
    )
    parser.add_argument(
        "--torchft-job", "--torchft_job", default="", metavar="APP_ID",
        help="with --torchft-lighthouse-env: the job whose lighthouse it must be (checked before the workers start)",
    )
    return parser


def console_main() -> None:
    """The console script and ``python -m`` entry: run, then leave without tearing torch down.

    A Python process that has imported torch spends about 0.3 s in interpreter teardown; the
    launcher has nothing left to clean up once its workers are gone (the rendezvous is shut
    down, logs are flushed), so it exits directly.
    """
    liveness_file = os.environ.get(LIVENESS_FILE_ENV)
    if liveness_file:
        start_touching(liveness_file)
    lock_standard_streams()
    # Node rank 0 serves the store to every node (open_files.py); before the forkserver starts,
    # so that the workers inherit it too. A caller of main() in its own process keeps its limit.
    raise_open_files_limit()
    preload_started = preload_server.start_early(sys.argv[1:])
    answer_requests()  # torchx stacks; after the fork of the preload server, which has no workers to ask
    code = main(preload_started=preload_started, exits_after=True)
    # atexit is skipped below: multiprocessing's finalizers would remove its temporary directory
    # (the forkserver's socket's) there.
    multiprocessing_util._run_finalizers()  # type: ignore[attr-defined]  # private, in 3.10 to 3.13
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None, preload_started: bool = False, exits_after: bool = False) -> int:
    """Run the launcher on ``argv``; returns its exit code (torchx_ext.exit_codes).

    Callable in-process, again and again and in a forked child: the caller gets its
    ``os.environ`` and signal handlers back, and the forkserver of preloaded workers lives
    only as long as the call that started it (see preload_server). ``exits_after``: the process
    ends with this call (the console entry), so what the run leaves is not cleaned up.
    """
    try:
        return _main(argv, preload_started)
    finally:
        if not exits_after:
            # The rendezvous' store server lives in reference cycles (handler classes, torch's
            # agent) until a garbage collection. One that runs in a child forked later tears it down
            # there: it joins its server thread, which the child does not have, and glibc, which gives
            # the child's new threads the parent's thread stacks, makes that a join of one of the
            # child's own threads, for ever. So it goes here, in the process whose thread it is.
            gc.collect()


def _main(argv: Sequence[str] | None, preload_started: bool) -> int:
    _configure_logging()
    args = build_parser().parse_args(argv)
    try:
        if apply_clock_offset():  # tests of clock skew between hosts only
            logger.warning("wall clocks off by %s s (%s)", clock_offset_s(), CLOCK_OFFSET_ENV)
    except TorchxExtError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT
    with caller_state_kept(), preload_server.server_of_this_call(started_early=preload_started) as callers_server:
        if callers_server and uses_preloaded_workers(args):
            logger.info(
                "a forkserver started by the caller runs in this process (with the caller's environment "
                "and preloads): workers start fresh, as with --worker-start fresh"
            )
            args.worker_start = "fresh"
        with log_dir_of_launch(args.log_dir, _redirects_or_none(args.redirects)) as args.log_dir, \
                progress_directory() as directory:
            try:
                progress = LaunchProgress.of_replica(directory, parse_hang_timeout(args.hang_timeout),
                                                     os.environ.get(ERROR_FILE_ENV))
                lighthouse = torchft_lighthouse(args)  # before prepare: preloaded workers carry it
                config, entrypoint, entry_args = prepare(args, progress)
            except TorchxExtError as error:
                print(f"error: {error}", file=sys.stderr)
                return BAD_INPUT
            finally:
                if preload_started and not uses_preloaded_workers(args):
                    preload_server.stop()  # its torch import would only compete with the workers' own
            if progress.stuck.stuck():  # a scheduler that restarts whatever the exit code (local_docker's engine)
                line = f"{progress.stuck.line()}, by this replica's launchers before this one"
                _report_launcher_failure(line, STUCK)
                print(f"[torchx_ext.launcher] error: {line}; no worker started", file=sys.stderr)
                return STUCK
            with served_timer(progress, config.run_id):
                code = run(config, entrypoint, entry_args, job_name=args.training_script, progress=progress)
            if code == OK and lighthouse is not None and args.node_rank in (None, 0):
                return end_with_the_lighthouse(*lighthouse)
            return code


LIGHTHOUSE_WAIT_S = 600.0
"""How long a group waits for its lighthouse to answer before its workers start (a pod of its own
may wait for an image or a node that long)."""


def torchft_lighthouse(args: argparse.Namespace) -> tuple[str, int] | None:
    """A torchft group's lighthouse (host, port), exported to its workers as torchft's variable
    (the caller's environment comes back: caller_state_kept), once it answered as this job's;
    None: not a torchft group. InvalidArgumentError, in one line: no torchft, another job's lighthouse."""
    if not args.torchft_lighthouse_env:
        return None
    if importlib.util.find_spec("torchft") is None:
        raise InvalidArgumentError(f"a torchft replica group needs torchft, which is not installed here: {FT_INSTALL_HINT}")
    host = os.environ.get(args.torchft_lighthouse_env) or "localhost"
    if is_loopback(host):
        host = "127.0.0.1"  # where a lighthouse on loopback listens (lighthouse.py), whatever localhost resolves to
    if args.torchft_job:
        check_the_lighthouse(host, ending_port(args.torchft_lighthouse_port), args.torchft_job, LIGHTHOUSE_WAIT_S)
    os.environ.setdefault(LIGHTHOUSE_ENV, f"http://{host}:{args.torchft_lighthouse_port}")
    return host, args.torchft_lighthouse_port


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def end_with_the_lighthouse(host: str, port: int) -> int:
    """This group is done: the lighthouse role ends once every group is (torchx_ext/ft/ending.py).
    0, or 128 + the signal that stopped the wait (a cancel; the caller's handlers come back)."""
    def stop(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    group = int(os.environ.get(GROUP_ID_ENV, "0"))
    try:
        wait_for_the_end(host, ending_port(port), group,
                         lambda line: print(f"[torchx_ext.launcher] {line}", file=sys.stderr, flush=True))
    except _Stopped as stopped:
        print(f"[torchx_ext.launcher] stopped by {signal.Signals(stopped.signum).name} while replica group {group} "
              "waited for the others", file=sys.stderr, flush=True)
        return 128 + stopped.signum
    return OK


@contextmanager
def progress_directory() -> Iterator[str]:
    """Where this launch's workers report their progress and stacks (worker_progress.py): made for
    the launch, named to them in the environment, removed at its end."""
    directory = tempfile.mkdtemp(prefix="torchx_ext_progress_")
    os.environ[PROGRESS_DIR_ENV] = directory  # the caller's environment comes back (caller_state_kept)
    answer_for(directory)
    try:
        yield directory
    finally:
        answer_for(None)
        shutil.rmtree(directory, ignore_errors=True)


def _redirects_or_none(text: str) -> Any:
    # Checked (and refused, in one line) by prepare; unreadable here means nothing to keep.
    try:
        return std_spec(text, "--redirects")
    except InvalidArgumentError:
        from torch.distributed.elastic.multiprocessing import Std

        return Std.NONE


def prepare(args: argparse.Namespace,
            progress: LaunchProgress | None = None) -> tuple[Any, Callable[..., Any] | str, list[str]]:
    """Check every input and plan the binding; returns what elastic_launch needs. Starts nothing.
    ``progress``: the hang watchdog's, for each round of a c10d rendezvous."""
    max_nodes, nproc = _checked_sizes(args)
    config = _launch_config(args, max_nodes, progress)
    device_kind, mode = _device_kind_and_mode(args)
    _, bindings = plan_workers(
        nproc,
        mode,
        strict=args.numa_strict,
        device_kind=device_kind,
        omp_threads=args.omp_threads,
        sysfs_root=args.numa_sysfs_root,
        dry_run=args.numa_dry_run,
    )
    entrypoint, entry_args = _entrypoint(args, config, encode_plan(bindings))
    return config, entrypoint, entry_args


def _checked_sizes(args: argparse.Namespace) -> tuple[int, int]:
    """The inputs torch would only fail on later, checked; the node count's MAX (capped at the
    allocation) and the workers per node."""
    from torch.distributed.run import parse_min_max_nnodes

    check_mode(args.numa_binding)
    if args.numa_device_kind not in (None, *DEVICE_KINDS):
        raise InvalidArgumentError(
            f"unknown --numa-device-kind {args.numa_device_kind!r}: valid values are {', '.join(DEVICE_KINDS)}"
        )
    try:
        min_nodes, max_nodes = parse_min_max_nnodes(args.nnodes)
    except (ValueError, RuntimeError) as error:
        raise InvalidArgumentError(f"invalid --nnodes {args.nnodes!r}: expected N or MIN:MAX") from error
    if not 0 < min_nodes <= max_nodes:
        raise InvalidArgumentError(
            f"invalid --nnodes {args.nnodes!r}: expected N or MIN:MAX with 1 <= MIN <= MAX"
        )
    max_nodes = _cap_at_allocation(args, min_nodes, max_nodes)
    nproc = local_world_size(args.nproc_per_node)
    check_rdzv_backend(args.rdzv_backend)
    std_spec(args.redirects, "--redirects")
    std_spec(args.tee, "--tee")
    _check_entrypoint(args)
    return max_nodes, nproc


def _launch_config(args: argparse.Namespace, max_nodes: int, progress: LaunchProgress | None) -> Any:
    """torch's ``LaunchConfig`` as torchrun makes it, with our rendezvous, store host and shutdown."""
    from torch.distributed.run import config_from_args

    _resolve_rendezvous(args, max_nodes)
    omp_decided_here = "OMP_NUM_THREADS" not in os.environ and args.omp_threads is not None
    if omp_decided_here:
        # Keeps config_from_args from exporting (and warning about) torchrun's default of 1:
        # the bootstrap sets each worker's value from the plan instead.
        os.environ["OMP_NUM_THREADS"] = "1"
    try:
        # torch's own --numa-binding stays off: ours is applied instead, once.
        config, _, _ = config_from_args(argparse.Namespace(**{**vars(args), "numa_binding": None}))
    except (ValueError, AssertionError) as error:
        raise InvalidArgumentError(str(error)) from error
    finally:
        if omp_decided_here:
            os.environ.pop("OMP_NUM_THREADS", None)
    if config.rdzv_endpoint.endswith(":0"):  # a free port of its own: only this launcher can host it
        config.rdzv_configs.setdefault("is_host", True)
    else:
        _set_store_host(config.rdzv_configs)
    watch_rendezvous(config, peer_timeout(args.peer_timeout, config.rdzv_configs), _leave_for_store_loss, args.node_rank,
                     args.spares, args.c10d_handler, progress)
    # LaunchConfig may still pick torch's default numa_options on CUDA hosts: clear them.
    config.numa_options = None
    if getattr(args, "shutdown_timeout", None) is None and "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in os.environ:
        config.shutdown_timeout = DEFAULT_SHUTDOWN_TIMEOUT_S
    return config


def _entrypoint(args: argparse.Namespace, config: Any, plan: str) -> tuple[Callable[..., Any] | str, list[str]]:
    """What each worker runs: the bootstrap (which binds, then runs the script, module or program),
    or, for --run-path and preloaded workers, a callable that does the same in a forked child."""
    script_args = [escape_template(arg) for arg in args.training_script_args]
    target = escape_template(args.training_script)
    if args.run_path:
        bound = BoundCallable(
            plan,
            run_script_path,
            (args.training_script, *args.training_script_args),
            pickled=config.start_method != "fork",
            bind_spawn_parent=config.start_method == "spawn",
        )
        return bound, ["${local_rank}"]
    if args.no_python:
        return sys.executable, ["-c", BOOTSTRAP_CODE, plan, "${local_rank}", "exec", target, *script_args]
    kind = "module" if args.module else "script"
    if uses_preloaded_workers(args):
        import multiprocessing.forkserver as forkserver

        # Arguments travel pickled, past torchelastic's ${local_rank} substitution: unescaped.
        config.start_method = "forkserver"
        forkserver.set_forkserver_preload(list(preload_server.PRELOAD_MODULES))  # if not started early, torch starts it
        bound = BoundCallable(plan, run_preloaded, (kind, args.training_script, *args.training_script_args), pickled=True)
        return bound, ["${local_rank}"]
    python = os.getenv("PYTHON_EXEC", sys.executable)
    return python, ["-u", "-c", BOOTSTRAP_CODE, plan, "${local_rank}", kind, target, *script_args]


def run(config: Any, entrypoint: Callable[..., Any] | str, entry_args: list[str], job_name: str,
        progress: LaunchProgress | None = None) -> int:
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    use_fresh_store_per_attempt_if_needed(config)
    unreachable = _unreachable_store(config)
    if unreachable is not None:
        _report_launcher_failure(unreachable)
        print(f"[torchx_ext.launcher] error: {unreachable}", file=sys.stderr)
        return FAILED
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # the workers end with this process (bootstrap)
    liveness_file = os.environ.get(LIVENESS_FILE_ENV)
    if liveness_file:
        mark_running(liveness_file)  # torch is imported: the short limit holds from now on
    try:
        elastic_launch(config=config, entrypoint=entrypoint)(*entry_args)
    except SpareReleased as error:
        print(f"[torchx_ext.launcher] {error}; nothing to replace", file=sys.stderr)
        return OK
    except (PeerLostError, HangError) as error:
        code = STUCK if isinstance(error, StuckError) else FAILED
        _report_launcher_failure(str(error), code)
        print(f"[torchx_ext.launcher] error: {error}; workers stopped", file=sys.stderr)
        return code
    except SignalException as error:
        # A scheduler's cancel (SIGTERM) or Ctrl+C: torchelastic has stopped the workers already.
        print(f"[torchx_ext.launcher] stopped by {signal.Signals(error.sigval).name}; workers stopped",
              file=sys.stderr)
        return 128 + int(error.sigval)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        _report_root_cause(rank, failure)
        error.name = job_name  # torch would title the report with our bootstrap's code
        print(error.format_msg(), file=sys.stderr)
        if progress is not None and progress.stuck.stuck():  # this attempt failed where the ones before did
            line = progress.stuck.line()
            _report_launcher_failure(line, STUCK, keep_traceback=True)
            print(f"[torchx_ext.launcher] error: {line}; the scheduler's restarts left unused", file=sys.stderr)
            return STUCK
        return FAILED
    except (RendezvousError, dist.DistError, TimeoutError) as error:
        lost = closed_store_line(error, config.rdzv_endpoint or "(default)")
        if lost is not None:
            _report_launcher_failure(lost)
            print(f"[torchx_ext.launcher] error: {lost}; stopping", file=sys.stderr)
            return FAILED
        timeout = config.rdzv_configs.get("join_timeout", config.rdzv_configs.get("timeout", 600))
        line = (f"rendezvous {config.run_id!r} ({_backend_name(config.rdzv_backend)} at "
                f"{config.rdzv_endpoint or '(default)'}) did not complete: {first_line(error)} (need {config.min_nodes}"
                f"{'' if config.min_nodes == config.max_nodes else f'-{config.max_nodes}'} nodes; timeout {timeout} s)")
        _report_launcher_failure(line)  # the job's summary says it too
        print(f"error: {line}", file=sys.stderr)
        return FAILED
    return OK


def _unreachable_store(config: Any) -> str | None:
    """The line to end with when this launcher, told not to host the store, cannot reach it."""
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    configs = config.rdzv_configs
    if (config.rdzv_backend not in ("c10d", WATCHED_BACKEND) or str(configs.get("store_type", "tcp")).lower() != "tcp"
            or str(configs.get("is_host", "")).strip().lower() not in ("false", "0", "f", "no", "n")):
        return None  # a file store, or a launcher that may host the store (torch's get_as_bool's words)
    host, port = parse_rendezvous_endpoint(config.rdzv_endpoint, default_port=C10D_DEFAULT_PORT)
    if port == 0:
        return None
    return reach_store(host, port, float(config.rdzv_configs.get("read_timeout", STORE_CONNECT_TIMEOUT_S)))


def _spares(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"invalid --spares {text!r}: expected a number of launchers, 0 or more")
    return int(text)


def _backend_name(backend: str) -> str:
    return "c10d" if backend == WATCHED_BACKEND else backend


def _leave_for_store_loss(loss: Loss) -> None:
    code = STUCK if loss.of_stuck_job else FAILED
    exit_for_store_loss(loss, code, lambda line: _report_launcher_failure(line, code, keep_traceback=loss.of_stuck_job))


def _report_launcher_failure(message: str, code: int = FAILED, keep_traceback: bool = False) -> None:
    """The launcher's own failure (not a worker's) as its replica's error report; ``keep_traceback``:
    with the failed worker's traceback already reported there."""
    path = os.environ.get(ERROR_FILE_ENV)
    if path:
        kept = read_error_file(path) if keep_traceback else None
        write_error_file(path, ErrorReport(message=message, error_code=code, traceback=kept.traceback if kept else ""),
                         replace=True)


def _report_root_cause(rank: int, failure: Any) -> None:
    """Put the first failure in our own error file, where a scheduler (torchx describe/status)
    looks for it: the worker's own report (as torchrun's @record does), with the exit code the
    worker could not know when a signal killed it; else one naming the rank and its exit code."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    # A worker that raised left its report in its own error file (torch names none, "<N/A>",
    # when there is no file: its error_file_data then holds a placeholder, not a report).
    report = read_error_file(failure.error_file)
    if report is not None:
        report = dataclasses.replace(report, error_code=failure.exitcode)
    else:
        how = f"was killed by {failure.signal_name()}" if failure.exitcode < 0 else f"exited with code {failure.exitcode}"
        report = ErrorReport(message=f"rank {rank} (local rank {failure.local_rank}) {how}", error_code=failure.exitcode)
    # This run's failure is the root cause: a report an earlier run left there is replaced.
    write_error_file(path, report, replace=True)


def uses_preloaded_workers(args: argparse.Namespace) -> bool:
    # PYTHON_EXEC names another interpreter for the workers (torchrun's meaning): honour it.
    return bool(
        args.worker_start == "preloaded"
        and not (args.no_python or args.run_path)
        and os.environ.get("PYTHON_EXEC", sys.executable) == sys.executable
    )


def _check_entrypoint(args: argparse.Namespace) -> None:
    script = args.training_script
    if args.no_python and args.module:
        raise InvalidArgumentError("--no-python and -m/--module cannot be used together")
    if args.module:
        top_level = script.split(".")[0]
        sys.path.insert(0, os.getcwd())
        try:
            found = importlib.util.find_spec(top_level) is not None
        finally:
            sys.path.pop(0)
        if not found:
            raise InvalidArgumentError(f"module {script!r} not found (run with -m from the directory that holds it)")
    elif args.no_python:
        if shutil.which(script) is None:
            raise InvalidArgumentError(f"program {script!r} not found on PATH or not executable (--no-python)")
    elif not os.path.isfile(script):
        raise InvalidArgumentError(f"training script {script!r} does not exist (give a path, or -m MODULE)")


def _cap_at_allocation(args: argparse.Namespace, min_nodes: int, max_nodes: int) -> int:
    """MAX of ``--nnodes``, lowered to the nodes a scheduler allocated (``ALLOCATED_NODES_ENV``)."""
    allocated = os.environ.get(ALLOCATED_NODES_ENV)
    if not allocated:
        return max_nodes
    if not (allocated.isascii() and allocated.isdigit() and int(allocated) > 0):
        raise InvalidArgumentError(f"invalid ${ALLOCATED_NODES_ENV} {allocated!r}: expected a node count, 1 or more")
    if int(allocated) < min_nodes:
        raise InvalidArgumentError(
            f"the scheduler allocated {allocated} nodes (${ALLOCATED_NODES_ENV}), fewer than --nnodes {args.nnodes!r} needs")
    if int(allocated) < max_nodes:
        args.nnodes = f"{min_nodes}:{allocated}"
        return int(allocated)
    return max_nodes


def _set_store_host(rdzv_configs: dict[str, Any]) -> None:
    # The scheduler knows which replica hosts the store; torch would guess from host names,
    # and replicas that share an address would race for the port.
    decided = os.environ.get(RDZV_IS_HOST_ENV)
    if decided in ("0", "1") and "is_host" not in rdzv_configs:
        rdzv_configs["is_host"] = decided == "1"


def _resolve_rendezvous(args: argparse.Namespace, max_nodes: int) -> None:
    if args.torchft_lighthouse_env and max_nodes == 1:
        # A torchft group of one node: its store is also where the other groups' process group meets
        # (torchft's quorum names it), so it listens on a free port at the address the scheduler gives
        # the role's replica 0 (its own), not on loopback, and never in a store it shares (local_cwd's).
        args.rdzv_endpoint_env = None
        args.rdzv_endpoint = f"{os.environ.get(RDZV_HOST_ENV) or 'localhost'}:0"
    if args.rdzv_endpoint_env:
        # The scheduler's host for this role's rendezvous, else what the component named (torchx's rank 0).
        host = os.environ.get(RDZV_HOST_ENV) or os.environ.get(args.rdzv_endpoint_env) or "localhost"
        port = os.environ.get(RDZV_PORT_ENV) or str(args.rdzv_port)
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise InvalidArgumentError(f"invalid ${RDZV_PORT_ENV} {port!r}: expected a port number 1-65535")
        args.rdzv_endpoint = f"{host}:{port}"
    if args.standalone:
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    elif args.rdzv_backend == "static" and not args.rdzv_endpoint and args.master_port is None and max_nodes == 1:
        # torchrun's single-node default: a c10d store on a free port.
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    if args.master_port is None:
        args.master_port = DEFAULT_RDZV_PORT


def _device_kind_and_mode(args: argparse.Namespace) -> tuple[str, str]:
    """The device kind and binding mode to plan with.

    ``--numa-device-kind`` wins; else ``--nproc-per-node`` says what the ranks drive: gpu
    and cpu by name, and for an integer the GPUs of a CUDA/ROCm build when enough are visible.
    Ranks that drive another accelerator (xpu, a PrivateUse1 backend, or what ``auto``
    counted) cannot be placed near their device: the planner knows only NVIDIA and AMD GPUs
    on PCI. Binding them as GPU ranks is impossible and as CPU-only ranks may put a rank on
    the node far from its device, so ``auto`` binds nothing, an explicit mode plans CPU
    shares and says so, and ``--numa-strict`` refuses.
    """
    mode = args.numa_binding
    if args.numa_device_kind is not None:
        return args.numa_device_kind, mode
    value = str(args.nproc_per_node).strip()
    if value in ("gpu", "cpu"):
        return value, mode
    accelerator = _unplaceable_accelerator(value)
    if accelerator is None:
        return _device_kind_of_torch(), mode
    why = (
        f"--nproc-per-node {value} ranks drive {accelerator} devices, whose NUMA nodes are unknown "
        "here (only NVIDIA and AMD GPUs on PCI are placed)"
    )
    if mode == "none":
        return "cpu", mode
    if mode == "auto":
        logger.warning(
            "NUMA binding off: %s; to give each rank a CPU share anyway, choose a mode with --numa-device-kind cpu", why
        )
        return "cpu", "none"
    if args.numa_strict:
        raise BindingFallbackError(
            f"strict NUMA binding refused: {why}; pass --numa-device-kind cpu to plan CPU shares for these ranks"
        )
    logger.warning(
        "NUMA binding fallback: %s; ranks get CPU shares as CPU-only ranks do, not the CPUs nearest their device", why
    )
    return "cpu", mode


def _unplaceable_accelerator(nproc_value: str) -> str | None:
    """The device type the ranks drive when it is not a CUDA/ROCm GPU, or None."""
    import torch

    if nproc_value in ("xpu", privateuse1_name()):
        return nproc_value
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if nproc_value == "auto" and accelerator is not None and accelerator.is_available():
        kind = str(accelerator.current_accelerator().type)
        return None if kind == "cuda" else kind  # ROCm builds call their GPUs cuda too
    return None


def _device_kind_of_torch() -> str:
    import torch

    return "cpu" if torch.version.cuda is None and torch.version.hip is None else "auto"


def _configure_logging() -> None:
    ours = logging.getLogger("torchx_ext")
    if not ours.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[torchx_ext.launcher] %(levelname)s %(message)s"))
        ours.addHandler(handler)
        ours.setLevel(logging.INFO)
        ours.propagate = False

"""``dist.ddp`` and ``dist.spmd``: torchx's distributed components, on our NUMA-binding launcher;
``dist.hsdp``: a torchft job (replica groups and their lighthouse) on the same launcher.

Every parameter of torchx's own ``dist.ddp``/``dist.spmd`` keeps its meaning; added are
``numa_binding``, ``numa_strict`` and ``omp_threads``. The role runs
``python -m torchx_ext.launcher`` with an argument list (never ``bash -c``): the rendezvous
host comes from the scheduler's rank-0 env var through ``--rdzv-endpoint-env``.

This module must not import torch: the torchx CLI imports every component on every call.
Annotations stay ``typing`` forms (no ``from __future__ import annotations``): torchx reads
them to build each component's command line.
"""

import os
import ast
import importlib.util
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

try:
    import torchx
except ModuleNotFoundError as missing:  # torchx is an extra: say which distribution to install
    from torchx_ext.registration.lines import INSTALL_HINT

    raise ImportError(f"torchx_ext.components needs torchx, which is not installed: {INSTALL_HINT}") from missing
from torchx import specs
from torchx.components.structured_arg import StructuredNameArgument
from torchx.specs import macros

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.escaping import escape_template
from torchx_ext.ft import DEFAULT_LIGHTHOUSE_PORT, GROUP_ID_ENV, GROUPS_ENV
from torchx_ext.ft import INSTALL_HINT as FT_INSTALL_HINT
from torchx_ext.ft.durations import parse_ms
from torchx_ext.options import check_mode, parse_hang_timeout, parse_omp_threads
from torchx_ext.role_metadata import SPARES_KEY, TORCHFT_GROUP, TORCHFT_KEY, TORCHFT_LIGHTHOUSE, target_metadata

J_FORMS = "NODESxPROCS (e.g. 2x4), MIN:MAXxPROCS (e.g. 2:5x8) or a single number"
MOUNT_FORMS = (
    "type=bind,src=HOST_PATH,dst=CONTAINER_PATH[,readonly], type=volume,src=NAME,dst=PATH[,readonly] "
    "or type=device,src=/dev/X[,dst=/dev/Y][,perm=rwm]"
)
TORCH_DEBUG_FLAGS: Dict[str, str] = {
    "CUDA_LAUNCH_BLOCKING": "1",
    "NCCL_DESYNC_DEBUG": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}
# torchx's registry holds two entries that are not resources (NULL, MISSING: its "none given").
_PLACEHOLDER_RESOURCES = {"NULL", "MISSING"}
_J_NODES_PROCS = re.compile(r"(?:(\d+):)?(\d+)x(\d+)")
_J_NUMBER = re.compile(r"\d+")


def ddp(
    *script_args: str,
    script: Optional[str] = None,
    m: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "/",
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    j: str = "1x2",
    spares: int = 0,
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    hang_timeout: Optional[str] = None,
    rdzv_port: int = 29500,
    rdzv_backend: str = "c10d",
    rdzv_conf: Optional[str] = None,
    mounts: Optional[List[str]] = None,
    debug: bool = False,
    tee: int = 3,
    numa_binding: str = "auto",
    numa_strict: bool = False,
    omp_threads: Optional[str] = "auto",
    metadata: Optional[Dict[str, str]] = None,
) -> specs.AppDef:
    """
    Distributed data parallel job (one role, NODES replicas of PROCS processes each) run by
    torchx_ext's launcher, which binds every worker to the CPUs near its GPU (or its share of
    the NUMA nodes for CPU-only jobs).

    Args:
        script_args: arguments to the script or module, passed exactly as given
        script: script to run (exactly one of script and m)
        m: python module to run
        image: image (e.g. docker) for container schedulers
        name: {experiment}/{run}, {experiment}/, /{run} or {run}; run defaults to the script or module name
        h: a named resource (takes precedence over cpu, gpu and memMB)
        cpu: CPUs per replica
        gpu: GPUs per replica
        memMB: memory per replica in MB
        j: [MIN:]NODESxPROCS or PROCS (one node), e.g. 2x4 or 2:5x8
        spares: hot spares: replicas beyond NODES that start with the job and wait to take a lost one's place (fixed -j NODESxPROCS)
        env: environment variables for the workers (e.g. ENV1=v1,ENV2=v2)
        max_retries: times a failed replica is started again (its survivors restart their workers in place)
        hang_timeout: seconds no rank may go without moving before the job counts as hung (every rank's stack to the log, then a restart), or off; default 300
        rdzv_port: rendezvous port on rank 0's host (multi-node jobs; single-node jobs use a free port)
        rdzv_backend: rendezvous backend (c10d, static, etcd, ...)
        rdzv_conf: extra rendezvous configuration, e.g. join_timeout=600,read_timeout=60
        mounts: mounts for container schedulers (e.g. type=bind,src=/host,dst=/job[,readonly])
        debug: set PyTorch's debug environment flags
        tee: tee the workers' streams to console and file: 0 none, 1 stdout, 2 stderr, 3 both
        numa_binding: none, auto, node, socket, exclusive or core-complex
        numa_strict: fail instead of taking a binding fallback
        omp_threads: OMP_NUM_THREADS per worker: auto (the rank's physical cores) or a number
        metadata: metadata for the scheduler, as torchx's (e.g. kubernetes=file:///path/pod_overlay.yaml)
    """
    min_nodes, max_nodes, nproc = parse_j(j)
    resource = _resource(cpu, gpu, memMB, h)
    return _app(
        script_args, script=script, m=m, image=image, name=name, resource=resource,
        nodes=(min_nodes, max_nodes), nproc=nproc, spares=spares, env=env, max_retries=max_retries,
        hang_timeout=hang_timeout, rdzv_port=rdzv_port, rdzv_backend=rdzv_backend, rdzv_conf=rdzv_conf, mounts=mounts,
        debug=debug, tee=tee, numa_binding=numa_binding, numa_strict=numa_strict, omp_threads=omp_threads,
        metadata=metadata,
    )


def spmd(
    *script_args: str,
    script: Optional[str] = None,
    m: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "/",
    h: str = "gpu.small",
    j: str = "1x1",
    spares: int = 0,
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    hang_timeout: Optional[str] = None,
    rdzv_port: int = 29500,
    rdzv_backend: str = "c10d",
    rdzv_conf: Optional[str] = None,
    mounts: Optional[List[str]] = None,
    debug: bool = False,
    numa_binding: str = "auto",
    numa_strict: bool = False,
    omp_threads: Optional[str] = "auto",
    metadata: Optional[Dict[str, str]] = None,
) -> specs.AppDef:
    """
    Single-program-multiple-data job: NODES replicas of PROCS copies of the same program, bound
    to the CPUs near their GPUs by torchx_ext's launcher. A bare -j N means N nodes with one
    process per GPU of the host (-h).

    Args:
        script_args: arguments to the script or module, passed exactly as given
        script: script to run (exactly one of script and m)
        m: python module to run
        image: image (e.g. docker) for container schedulers
        name: {experiment}/{run}, {experiment}/, /{run} or {run}; run defaults to the script or module name
        h: a named resource, e.g. aws_p5.48xlarge
        j: [MIN:]NODESxPROCS, or NODES (PROCS = the host's GPU count), e.g. 2x8, 2:5x8 or 2
        spares: hot spares: replicas beyond NODES that start with the job and wait to take a lost one's place (fixed -j NODESxPROCS)
        env: environment variables for the workers (e.g. ENV1=v1,ENV2=v2)
        max_retries: times a failed replica is started again (its survivors restart their workers in place)
        hang_timeout: seconds no rank may go without moving before the job counts as hung (every rank's stack to the log, then a restart), or off; default 300
        rdzv_port: rendezvous port on rank 0's host (multi-node jobs; single-node jobs use a free port)
        rdzv_backend: rendezvous backend (c10d, static, etcd, ...)
        rdzv_conf: extra rendezvous configuration, e.g. join_timeout=600
        mounts: mounts for container schedulers (e.g. type=bind,src=/host,dst=/job[,readonly])
        debug: set PyTorch's debug environment flags
        numa_binding: none, auto, node, socket, exclusive or core-complex
        numa_strict: fail instead of taking a binding fallback
        omp_threads: OMP_NUM_THREADS per worker: auto (the rank's physical cores) or a number
        metadata: metadata for the scheduler, as torchx's (e.g. kubernetes=file:///path/pod_overlay.yaml)
    """
    gpus = _resource(2, 0, 1024, h).gpu
    j = j.strip()
    if _J_NUMBER.fullmatch(j):
        if gpus < 1:
            raise InvalidArgumentError(
                f"-j {j!r} means {j} nodes with one process per GPU, but {h!r} has no GPU: "
                f"give the processes per node as NODESxPROCS (e.g. {j}x8)"
            )
        j = f"{j}x{gpus}"
    return ddp(
        *script_args, script=script, m=m, image=image, name=name, h=h, j=j, spares=spares, env=env,
        max_retries=max_retries, hang_timeout=hang_timeout, rdzv_port=rdzv_port, rdzv_backend=rdzv_backend,
        rdzv_conf=rdzv_conf,
        mounts=mounts, debug=debug, numa_binding=numa_binding, numa_strict=numa_strict, omp_threads=omp_threads,
        metadata=metadata,
    )


def hsdp(
    *script_args: str,
    script: Optional[str] = None,
    m: Optional[str] = None,
    replicas: int = 2,
    workers_per_replica: int = 1,
    j: Optional[str] = None,
    min_replicas: int = 1,
    heartbeat_timeout: str = "1s",
    quorum_tick: str = "100ms",
    join_timeout: str = "60s",
    lighthouse_port: int = DEFAULT_LIGHTHOUSE_PORT,
    max_restarts: int = 10,
    max_retries: int = 3,
    image: str = torchx.IMAGE,
    name: str = "/",
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    env: Optional[Dict[str, str]] = None,
    hang_timeout: Optional[str] = None,
    rdzv_port: int = 29500,
    mounts: Optional[List[str]] = None,
    debug: bool = False,
    tee: int = 3,
    numa_binding: str = "auto",
    numa_strict: bool = False,
    omp_threads: Optional[str] = "auto",
    metadata: Optional[Dict[str, str]] = None,
) -> specs.AppDef:
    """
    A torchft job (checkpoint-free recovery): REPLICAS replica groups that each train on their own
    (NODES replicas of PROCS processes, run by torchx_ext's launcher, which binds every worker), and a
    lighthouse role that agrees at every step on the live groups. A lost group costs the others a
    step, not a restart; it comes back alone and copies the weights from a live group. Needs
    torchft (pip install 'torchx_ext[ft]'); the script is a torchft script, as in torchft's examples.

    Args:
        script_args: arguments to the script or module, passed exactly as given
        script: script to run (exactly one of script and m)
        m: python module to run
        replicas: replica groups (torchft's replicas; each sees REPLICA_GROUP_ID and NUM_REPLICA_GROUPS)
        workers_per_replica: processes of each group, on one node (torchft's; or give -j)
        j: NODESxPROCS of each group, e.g. 2x8 (instead of workers_per_replica)
        min_replicas: groups a step needs (the lighthouse's min_replicas)
        heartbeat_timeout: a group silent this long is left out of the next step (the lighthouse's), e.g. 1s or 500ms
        quorum_tick: how often the lighthouse decides a step's groups, e.g. 100ms
        join_timeout: how long the lighthouse waits for every live group to join before going on with min_replicas, e.g. 60s
        lighthouse_port: the lighthouse's port (the next port hears that groups are done)
        max_restarts: times a group restarts its workers in place (torchft's; the other groups go on)
        max_retries: times a lost replica of a group, or the lighthouse, is started again (alone)
        image: image (e.g. docker) for container schedulers
        name: {experiment}/{run}, {experiment}/, /{run} or {run}; run defaults to the script or module name
        h: a named resource for each group's replicas (takes precedence over cpu, gpu and memMB)
        cpu: CPUs per replica of a group
        gpu: GPUs per replica of a group
        memMB: memory per replica of a group in MB
        env: environment variables for the workers and the lighthouse (e.g. ENV1=v1,ENV2=v2)
        hang_timeout: seconds no rank of a group may go without moving before the group counts as hung, or off; default 300
        rdzv_port: each group's rendezvous port on its replica 0's host (groups of several nodes)
        mounts: mounts for container schedulers (e.g. type=bind,src=/host,dst=/job[,readonly])
        debug: set PyTorch's debug environment flags
        tee: tee the workers' streams to console and file: 0 none, 1 stdout, 2 stderr, 3 both
        numa_binding: none, auto, node, socket, exclusive or core-complex
        numa_strict: fail instead of taking a binding fallback
        omp_threads: OMP_NUM_THREADS per worker: auto (the rank's physical cores) or a number
        metadata: metadata for the scheduler, as torchx's (e.g. kubernetes=file:///path/pod_overlay.yaml)
    """
    if replicas < 1:
        raise InvalidArgumentError(f"invalid --replicas {replicas}: expected 1 or more replica groups")
    if not 1 <= min_replicas <= replicas:
        raise InvalidArgumentError(
            f"invalid --min_replicas {min_replicas}: expected 1 to {replicas} (--replicas, the replica groups)")
    settings = {flag: parse_ms(value, f"--{flag}") for flag, value in
                (("heartbeat_timeout", heartbeat_timeout), ("quorum_tick", quorum_tick), ("join_timeout", join_timeout))}
    if not 0 < lighthouse_port < 65535:
        raise InvalidArgumentError(f"invalid --lighthouse_port {lighthouse_port}: expected 1 to 65534 "
                                   "(the next port hears that groups are done)")
    if max_restarts < 0:
        raise InvalidArgumentError(f"invalid --max_restarts {max_restarts}: expected 0 or more restarts in place")
    if rdzv_port in (lighthouse_port, lighthouse_port + 1):
        raise InvalidArgumentError(f"--rdzv_port {rdzv_port} is one of the lighthouse's ports ({lighthouse_port} and "
                                   f"{lighthouse_port + 1}, --lighthouse_port): give another")
    nodes, nproc = _group_size(j, workers_per_replica)
    if importlib.util.find_spec("torchft") is None:
        raise InvalidArgumentError(f"dist.hsdp runs torchft jobs, and torchft is not installed here: {FT_INSTALL_HINT}")
    resource = _resource(cpu, gpu, memMB, h)
    groups = [
        _app(
            script_args, script=script, m=m, image=image, name=name, resource=resource, nodes=(nodes, nodes),
            nproc=nproc, spares=0, env={**QUORUM_RETRIES, **(env or {}), GROUP_ID_ENV: str(group),
                                        GROUPS_ENV: str(replicas)},
            max_retries=max_retries, hang_timeout=hang_timeout, rdzv_port=rdzv_port, rdzv_backend="c10d",
            rdzv_conf=None, mounts=mounts, debug=debug, tee=tee, numa_binding=numa_binding, numa_strict=numa_strict,
            omp_threads=omp_threads, metadata={**(metadata or {}), TORCHFT_KEY: TORCHFT_GROUP},
            role_name=f"replica_{group}",
            rdzv_id=f"{macros.app_id}-replica_{group}", restarts=max_restarts,
            launcher_args=("--torchft-lighthouse-env", macros.rank0_env,
                           "--torchft-lighthouse-port", str(lighthouse_port), "--torchft-job", macros.app_id),
        )
        for group in range(replicas)
    ]
    lighthouse = specs.Role(
        name="lighthouse",
        image=image,
        entrypoint="python",
        args=["-m", "torchx_ext.ft.lighthouse", "--job", macros.app_id, "--groups", str(replicas),
              "--min-replicas", str(min_replicas),
              "--port", str(lighthouse_port), "--heartbeat-timeout-ms", str(settings["heartbeat_timeout"]),
              "--quorum-tick-ms", str(settings["quorum_tick"]), "--join-timeout-ms", str(settings["join_timeout"])],
        env={key: escape_template(value) for key, value in (env or {}).items()},
        resource=specs.Resource(cpu=1, gpu=0, memMB=1024),
        num_replicas=1,
        port_map={"lighthouse": lighthouse_port},
        max_retries=max_retries,
        retry_policy=specs.RetryPolicy.REPLICA,
        mounts=_mounts(mounts),
        metadata={**(metadata or {}), TORCHFT_KEY: TORCHFT_LIGHTHOUSE},
    )
    # The lighthouse first: torchx's rank 0 (the first role's replica 0) is its host, on every scheduler.
    return specs.AppDef(name=groups[0].name, roles=[lighthouse, *(app.roles[0] for app in groups)])


QUORUM_RETRIES: Dict[str, str] = {"TORCHFT_QUORUM_RETRIES": "60"}
"""torchft's default (0) leaves a group waiting out its quorum timeout (60 s) for a lighthouse that was
lost and started again: retried, the groups go on a few seconds after it is back. --env overrides it."""


def _group_size(j: Optional[str], workers_per_replica: int) -> Tuple[int, int]:
    """A replica group's (nodes, processes per node): -j NODESxPROCS, else one node of workers_per_replica."""
    if j is None:
        if workers_per_replica < 1:
            raise InvalidArgumentError(f"invalid --workers_per_replica {workers_per_replica}: expected 1 or more")
        return 1, workers_per_replica
    if workers_per_replica != 1:
        raise InvalidArgumentError(
            f"give -j {j!r} or --workers_per_replica {workers_per_replica}, not both (-j NODESxPROCS of each group)")
    min_nodes, max_nodes, nproc = parse_j(j)
    if min_nodes != max_nodes:
        raise InvalidArgumentError(
            f"invalid -j {j!r}: a replica group has a fixed size (NODESxPROCS, e.g. {max_nodes}x{nproc}); "
            "groups come and go as a whole, which --min_replicas bounds")
    return max_nodes, nproc


def parse_j(j: str) -> Tuple[int, int, int]:
    """``[MIN:]NODESxPROCS`` or ``PROCS`` (one node) -> (min nodes, max nodes, procs per node)."""
    text = j.strip()
    match = _J_NODES_PROCS.fullmatch(text)
    if match:
        low, high, procs = match.groups()
        min_nodes, max_nodes, nproc = int(low if low is not None else high), int(high), int(procs)
    elif _J_NUMBER.fullmatch(text):
        min_nodes, max_nodes, nproc = 1, 1, int(text)
    else:
        raise InvalidArgumentError(f"invalid -j {j!r}: expected {J_FORMS}")
    if min_nodes < 1 or nproc < 1:
        raise InvalidArgumentError(f"invalid -j {j!r}: nodes and processes must be at least 1 ({J_FORMS})")
    if min_nodes > max_nodes:
        raise InvalidArgumentError(f"invalid -j {j!r}: MIN {min_nodes} is above MAX {max_nodes} ({J_FORMS})")
    return min_nodes, max_nodes, nproc


def _resource(cpu: int, gpu: int, memMB: int, h: Optional[str]) -> specs.Resource:
    if h is None:
        return specs.resource(cpu=cpu, gpu=gpu, memMB=memMB)
    try:
        # resource(h=) on both lines: nightly deprecates named_resources[h] with a warning.
        return specs.resource(h=h)
    except KeyError as error:
        suggestion = re.search(r"Did you mean `([^`]+)`", str(error.args[0]))
        hint = f" (did you mean {suggestion.group(1)}?)" if suggestion else ""
        raise InvalidArgumentError(f"unknown named resource -h {h!r}{hint}: known are {_known_resources()}") from None


def _known_resources() -> str:
    # torchx's registry cannot be listed on torchx 0.7.0; its error for a name like no other
    # lists every entry (as a Python list).
    try:
        specs.resource(h="\0")
    except KeyError as error:
        listed = re.search(r"\[[^\]]*\]", str(error.args[0]))
        try:
            names = ast.literal_eval(listed.group(0)) if listed else None
        except (ValueError, SyntaxError):
            names = None
        if isinstance(names, list):
            return ", ".join(sorted(set(map(str, names)) - _PLACEHOLDER_RESOURCES))
    return "(this torchx did not list them)"


def _app(
    script_args: Tuple[str, ...],
    *,
    script: Optional[str],
    m: Optional[str],
    image: str,
    name: str,
    resource: specs.Resource,
    nodes: Tuple[int, int],
    nproc: int,
    spares: int,
    env: Optional[Dict[str, str]],
    max_retries: int,
    hang_timeout: Optional[str],
    rdzv_port: int,
    rdzv_backend: str,
    rdzv_conf: Optional[str],
    mounts: Optional[List[str]],
    debug: bool,
    tee: int,
    numa_binding: str,
    numa_strict: bool,
    omp_threads: Optional[str],
    metadata: Optional[Dict[str, str]] = None,
    role_name: Optional[str] = None,
    rdzv_id: str = macros.app_id,
    launcher_args: Tuple[str, ...] = (),
    restarts: Optional[int] = None,
) -> specs.AppDef:
    """One role of NODES replicas running our launcher; ``restarts``: its ``--max-restarts`` where the
    caller decides it (else ``max_restarts``), ``launcher_args``: more launcher flags."""
    if (script is None) == (m is None):
        raise InvalidArgumentError(
            "give exactly one of --script SCRIPT and -m MODULE "
            f"(got {'both' if script is not None else 'neither'})"
        )
    check_mode(numa_binding)
    parse_omp_threads(omp_threads)
    if hang_timeout is not None:
        parse_hang_timeout(hang_timeout, "--hang_timeout")
    if resource.gpu > 0 and nproc > resource.gpu:
        raise InvalidArgumentError(
            f"{nproc} processes per node but the host has {resource.gpu} GPUs: "
            f"use at most {resource.gpu} (e.g. -j {nodes[1]}x{resource.gpu})"
        )
    min_nodes, max_nodes = nodes
    check_spares(spares, min_nodes, max_nodes, rdzv_backend)
    replicas = max_nodes + spares
    names = StructuredNameArgument.parse_from(name=name, m=m, script=script)
    worker_env = dict(env or {})
    worker_env["TORCHX_TRACKING_EXPERIMENT_NAME"] = names.experiment_name
    worker_env["TORCHX_TRACKING_RUN_NAME"] = names.run_name
    worker_env.setdefault("LOGLEVEL", os.getenv("LOGLEVEL", "WARNING"))
    if debug:
        worker_env.update(TORCH_DEBUG_FLAGS)
    args = [
        "-m", "torchx_ext.launcher",
        "--rdzv-backend", rdzv_backend,
        "--rdzv-id", rdzv_id,
        "--nnodes", str(max_nodes) if min_nodes == max_nodes else f"{min_nodes}:{max_nodes}",
        "--nproc-per-node", str(nproc),
        "--tee", str(tee),
        "--role", "",
        "--numa-binding", numa_binding,
    ]
    if replicas == 1:
        if rdzv_backend != "static":
            args += ["--rdzv-endpoint", "localhost:0"]  # one agent: any free port will do
        # static on one node with no endpoint: the launcher, like torchrun, takes a free port
        # (static at localhost:0 would wait forever for a store nobody can reach)
    else:
        args += ["--rdzv-endpoint-env", macros.rank0_env, "--rdzv-port", str(rdzv_port)]
    if rdzv_backend == "static" or (min_nodes == max_nodes and replicas > 1):
        # c10d: replica k runs group rank k (the launcher's order; torch's would go by address);
        # a spare takes the place of the replica it replaced.
        args += ["--node-rank", macros.replica_id]
    if spares:
        # The spelling every launcher takes: an image may hold a torchx_ext from before --spares.
        args += ["--hot-spares", str(spares)]
    if restarts is None:
        restarts = max_restarts(max_retries, min_nodes, max_nodes, spares)
    if restarts:
        args += ["--max-restarts", str(restarts)]
    conf = rdzv_conf_with_liveness(rdzv_conf) if restarts and rdzv_backend == "c10d" else rdzv_conf
    if conf:
        args += ["--rdzv-conf", conf]
    if hang_timeout is not None:  # else the launcher's default (an image's older launcher lacks the flag)
        args += ["--hang-timeout", str(hang_timeout)]
    if numa_strict:
        args.append("--numa-strict")
    if omp_threads is not None:
        args += ["--omp-threads", str(omp_threads)]
    args += launcher_args
    # torchx substitutes ${...} macros in every argument and env value: "$$" gives back "$".
    user_args = [escape_template(arg) for arg in script_args]
    args += [escape_template(script)] if script is not None else ["-m", escape_template(m or "")]
    args += user_args
    return specs.AppDef(
        name=names.run_name,
        roles=[
            specs.Role(
                name=role_name or _role_name(script, m),
                image=image,
                entrypoint="python",
                args=args,
                env={key: escape_template(value) for key, value in worker_env.items()},
                resource=resource,
                min_replicas=min_nodes,
                num_replicas=replicas,
                port_map={"c10d": rdzv_port},
                max_retries=max_retries,
                # Our launcher re-rendezvouses with a replaced replica: only the lost one is started again
                # (with spares: as a new spare).
                # torchx-nightly has no HOT_SPARE: REPLICA, and the spares said in the metadata.
                retry_policy=getattr(specs.RetryPolicy, "HOT_SPARE", specs.RetryPolicy.REPLICA)
                if spares else specs.RetryPolicy.REPLICA,
                mounts=_mounts(mounts),
                metadata={**target_metadata(script, m), **(metadata or {}),
                          **({SPARES_KEY: str(spares)} if spares else {})},
            )
        ],
    )


def max_restarts(max_retries: int, min_nodes: int, max_nodes: int, spares: int = 0) -> int:
    """The launcher's ``--max-restarts`` for a role of ``max_retries``: enough for a survivor to
    restart its workers in place once for every restart of every replica (spares included), plus
    once for each replica an elastic job may lose for good and each spare that may take a lost
    one's place. None on one node without spares: the scheduler restarts the replica (and counts it in
    ``num_restarts``)."""
    if max_nodes + spares == 1:
        return 0
    return max_retries * (max_nodes + spares) + (max_nodes - min_nodes) + spares


def check_spares(spares: int, min_nodes: int, max_nodes: int, rdzv_backend: str) -> None:
    """Hot spares wait in c10d's redundancy list beyond a fixed node count: refused elsewhere, in one line."""
    if spares < 0:
        raise InvalidArgumentError(f"invalid --spares {spares}: expected 0 or more hot spares")
    if not spares:
        return
    if min_nodes != max_nodes:
        raise InvalidArgumentError(
            f"--spares {spares} needs a fixed node count: -j {min_nodes}:{max_nodes}x... is elastic, "
            f"and takes extra replicas as nodes up to {max_nodes}; give -j {max_nodes}xPROCS --spares {spares}, "
            f"or -j {min_nodes}:{max_nodes + spares}xPROCS"
        )
    if rdzv_backend != "c10d":
        raise InvalidArgumentError(
            f"--spares {spares} needs --rdzv_backend c10d (got {rdzv_backend!r}): spares wait in its rendezvous"
        )


RDZV_LIVENESS: Dict[str, str] = {
    # torch's defaults (5 s x 3) let survivors wait 15 s for a lost agent to count as gone before
    # they re-form: 2 s x 3 takes 6 s. last_call: how long a re-formed elastic round waits for
    # more than MIN agents (torch: 30 s).
    "keep_alive_interval": "2",
    "keep_alive_max_attempt": "3",
    "last_call_timeout": "5",
}


def rdzv_conf_with_liveness(rdzv_conf: Optional[str]) -> str:
    """``rdzv_conf`` with :data:`RDZV_LIVENESS` for each key it does not set itself."""
    given = [item for item in (rdzv_conf or "").split(",") if item.strip()]
    keys = {item.partition("=")[0].strip() for item in given}
    return ",".join([*given, *(f"{key}={value}" for key, value in RDZV_LIVENESS.items() if key not in keys)])


def _role_name(script: Optional[str], m: Optional[str]) -> str:
    return Path(script).stem if script is not None else (m or "").rpartition(".")[2]


def _mounts(mounts: Optional[List[str]]) -> List[specs.BindMount | specs.VolumeMount | specs.DeviceMount]:
    if not mounts:
        return []
    try:
        return list(specs.parse_mounts(mounts))
    except (KeyError, ValueError) as error:
        raise InvalidArgumentError(
            f"malformed --mounts {','.join(mounts)!r} ({error}): expected {MOUNT_FORMS}"
        ) from None

"""What local_cwd will start, built purely from an AppDef: one process per replica.

``build_request`` is the whole of local_cwd's dry-run: it resolves macros and the entrypoint,
adds the environment torchx's local scheduler gives a replica (rank-0 host, error file) plus
ours (the job marker; the job's rendezvous port is added by the supervisor as the job starts), and gives each replica its slice of the host.
The request is written to the job directory as JSON; the supervisor process runs it.
"""

from __future__ import annotations

import os
import shutil
from typing import Mapping

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.topology import Topology
from torchx_ext.replica_env import ERROR_FILE_ENV, RANK0_HOST_ENV, RDZV_PORT_ENV, shutdown_timeout_env
from torchx_ext.role_metadata import TORCHFT_GROUP, TORCHFT_KEY
from torchx_ext.schedulers.local.processes import JOB_MARKER_ENV, REPLICA_MARKER_ENV
from torchx_ext.schedulers.local.records import ERROR_FILE_NAME
from torchx_ext.schedulers.local.request import LocalJobRequest, ReplicaRequest, LocalRoleRequest
from torchx_ext.schedulers.common.role_policy import policy_of
from torchx_ext.schedulers.common.role_spec import role_spec
from torchx_ext.schedulers.placement import slice_host



def build_request(
    app: specs.AppDef,
    *,
    app_id: str,
    app_dir: str,
    cwd: str,
    interpreter: str,
    environ: Mapping[str, str],
    topology: Topology | None,
    prepend_cwd: bool = False,
    cancel_grace_s: float = 10.0,
    gpus_to_split: int | None = None,
    warm: bool = False,
) -> LocalJobRequest:
    """The processes to start for ``app``; ``topology`` None turns slicing off; ``gpus_to_split``:
    the host's GPU count when ``auto_set_cuda_visible_devices`` asks for torchx's split of them."""
    check_torchft_groups(app)
    total = sum(role.num_replicas for role in app.roles)
    slices = slice_host(topology, total) if topology is not None and total > 1 else []
    share_gpus = bool(slices) and "CUDA_VISIBLE_DEVICES" not in environ and any(
        "CUDA_VISIBLE_DEVICES" not in role.env and role.resource.gpu > 0 for role in app.roles
    )
    split, split_warning = torchx_gpu_split(app, gpus_to_split) if gpus_to_split is not None else ({}, None)
    roles: list[LocalRoleRequest] = []
    position = 0
    for role in app.roles:
        path = _path_with_cwd(role.env.get("PATH"), environ.get("PATH", ""), cwd, prepend_cwd)
        entrypoint = _resolve_entrypoint(role, interpreter, path, cwd)
        replicas = []
        for replica_id in range(role.num_replicas):
            values = specs.macros.Values(
                img_root=cwd, app_id=app_id, replica_id=str(replica_id), rank0_env=RANK0_HOST_ENV
            )
            resolved = values.apply(role)
            log_dir = os.path.join(app_dir, role.name, str(replica_id))
            env = {
                RANK0_HOST_ENV: "localhost",
                ERROR_FILE_ENV: os.path.join(log_dir, ERROR_FILE_NAME),
                "PET_LOG_DIR": os.path.join(app_dir, "torchelastic", role.name),
                **shutdown_timeout_env(cancel_grace_s),
                **resolved.env,
                "PATH": _path_with_cwd(resolved.env.get("PATH"), environ.get("PATH", ""), cwd, prepend_cwd),
                JOB_MARKER_ENV: app_id,
                REPLICA_MARKER_ENV: f"{role.name}/{replica_id}",
            }
            cpus = None
            if slices:
                piece = slices[position]
                cpus = sorted(piece.cpus)
                if share_gpus and role.resource.gpu > 0 and "CUDA_VISIBLE_DEVICES" not in role.env:
                    env["CUDA_VISIBLE_DEVICES"] = piece.cuda_visible_devices
            if (role.name, replica_id) in split:
                env["CUDA_VISIBLE_DEVICES"] = split[role.name, replica_id]  # torchx's split wins, as in torchx
            position += 1
            replicas.append(
                ReplicaRequest(role.name, replica_id, [entrypoint, *resolved.args], env, cwd, cpus, log_dir)
            )
        roles.append(LocalRoleRequest(role.name, replicas, role_spec(role), policy_of(role)))
    return LocalJobRequest(
        app_id=app_id,
        app_dir=app_dir,
        roles=roles,
        slices=[piece.describe() for piece in slices],
        warnings=sorted({warning for piece in slices for warning in piece.warnings}
                        | ({split_warning} if split_warning else set())),
        cancel_grace_s=cancel_grace_s,
        warm=warm,
    )


def check_torchft_groups(app: specs.AppDef) -> None:
    """A torchft group of several replicas would share the job's one rendezvous store (and port) with
    the other groups, where torchft's managers keep their keys unprefixed: refused, in one line."""
    for role in app.roles:
        if role.metadata.get(TORCHFT_KEY) == TORCHFT_GROUP and role.num_replicas > 1:
            raise InvalidArgumentError(
                f"role {role.name!r}: local_cwd runs each torchft replica group on one node (dist.hsdp -j 1xPROCS "
                f"or --workers_per_replica), not {role.num_replicas}: its replicas share one rendezvous store")


def torchx_gpu_split(app: specs.AppDef, device_count: int) -> tuple[dict[tuple[str, int], str], str | None]:
    """torchx's ``auto_set_cuda_visible_devices``: every GPU replica, in role order, gets the next
    ``resource.gpu`` of the host's ``device_count`` GPUs (over its role's own CUDA_VISIBLE_DEVICES);
    nothing is set, and a warning says why, when the app asks for more GPUs than the host has."""
    wanted = sum(role.num_replicas * max(role.resource.gpu, 0) for role in app.roles)
    if wanted == 0:
        return {}, None
    if wanted > device_count:
        return {}, (f"auto_set_cuda_visible_devices: the app asks for {wanted} GPUs and this host has "
                    f"{device_count}: CUDA_VISIBLE_DEVICES is not set")
    split: dict[tuple[str, int], str] = {}
    first = 0
    for role in app.roles:
        if role.resource.gpu <= 0:
            continue
        for replica_id in range(role.num_replicas):
            split[role.name, replica_id] = ",".join(str(index) for index in range(first, first + role.resource.gpu))
            first += role.resource.gpu
    return split, None


def describe_request(request: LocalJobRequest) -> str:
    """The dry-run text: slices first, then each replica's command, CPUs and environment."""
    lines = [f"app_id: {request.app_id}", f"app_dir: {request.app_dir}"]
    lines += [f"slice {text}" for text in request.slices]
    lines += [f"warning: {text}" for text in request.warnings]
    # Picked by the supervisor as the job starts: a port probed now could be taken by then.
    lines.append(f"rendezvous port: a free port chosen when the job starts (${RDZV_PORT_ENV})")
    for replica in request.replicas():
        cpus = "inherit" if replica.cpus is None else format_cpulist(replica.cpus)
        lines.append(f"{replica.role}/{replica.replica_id}: cpus={cpus} cwd={replica.cwd}")
        lines.append(f"  argv: {replica.argv!r}")
        lines += [f"  env {key}={value!r}" for key, value in sorted(replica.env.items())]
    return "\n".join(lines)


def _resolve_entrypoint(role: specs.Role, interpreter: str, path: str, cwd: str) -> str:
    # `python` means the interpreter torchx runs under, so a virtual environment's torchx
    # works without activating it.
    entrypoint: str = role.entrypoint
    if entrypoint == "python":
        return interpreter
    if os.sep in entrypoint:
        if os.access(os.path.join(cwd, entrypoint), os.X_OK):
            return entrypoint
        raise InvalidArgumentError(
            f"entrypoint {entrypoint!r} of role {role.name!r} is not an executable file (relative to {cwd})"
        )
    found = shutil.which(entrypoint, path=path)
    if found is None:
        raise InvalidArgumentError(
            f"entrypoint {entrypoint!r} of role {role.name!r} is not on PATH ({path}): "
            "give an executable on PATH, a path to one, or python"
        )
    return found


def _path_with_cwd(role_path: str | None, parent_path: str, cwd: str, prepend: bool) -> str:
    """torchx's PATH for a replica: the role's own PATH with ``cwd`` after it (before it with
    ``prepend_cwd``), then the submitter's. A role without one: the submitter's PATH with ``cwd``
    after it, as the option's help says (torchx 0.7.0 puts ``cwd`` first then, prepend or not)."""
    def parts(path: str | None) -> list[str]:
        return [part for part in (path or "").split(os.pathsep) if part]

    if role_path is None:
        return os.pathsep.join([cwd, *parts(parent_path)] if prepend else [*parts(parent_path), cwd])
    own = [cwd, *parts(role_path)] if prepend else [*parts(role_path), cwd]
    return os.pathsep.join([*own, *parts(parent_path)])

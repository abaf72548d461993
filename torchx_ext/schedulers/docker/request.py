"""What local_docker will create, built purely from an AppDef: one container per replica.

``build_request`` is the whole dry-run: names (``{app_id}-{role}-{replica}``, also the
hostname on the job's own network), the rank-0 host env, each replica's slice of the host as
``cpuset_cpus``/``cpuset_mems`` (whole NUMA nodes where there are enough, so memory is local
too), its own GPUs, memory and ``/dev/shm`` limits, and the labels from which any process can
later describe, list, cancel and delete the job. Nothing here talks to the engine.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.numa.topology import Topology
from torchx_ext.liveness import probe_command, runs_our_launcher
from torchx_ext.replica_env import ERROR_FILE_ENV, LIVENESS_FILE_ENV, RANK0_HOST_ENV, RDZV_HOST_ENV, REPLICA_ENV, shutdown_timeout_env
from torchx_ext.schedulers.common.checks import shm_mb
from torchx_ext.schedulers.common.role_policy import RolePolicy, app_replicas, policies_of
from torchx_ext.schedulers.placement import ReplicaSlice, slice_host

SCHEDULER = "local_docker"
# Inside the container: /tmp exists in practically every image and is writable.
ERROR_FILE = "/tmp/torchx_ext_error.json"
LIVENESS_FILE = "/tmp/torchx_ext_liveness"
HEALTH_INTERVAL_S = 2
HEALTH_RETRIES = 2  # one slow probe on a loaded host is not a frozen replica
HEALTH_PROBE_TIMEOUT_S = 10
HEALTH_START_PERIOD_S = 15
HOSTNAME_MAX = 63
SHM_FORMS = "'auto', or a size such as 512m, 2g, 1073741824 (bytes), 64k"
DEVICE_PATHS = {"vpc.amazonaws.com/efa": "/dev/infiniband/uverbs{}", "aws.amazon.com/neurondevice": "/dev/neuron{}"}
"""``resource.devices`` names (torchx's EFA_DEVICE, NEURON_DEVICE) -> the host device files, by index."""

# Labels: everything describe/list/cancel/delete need, on every container of the job.
LABEL_SCHEDULER = "torchx_ext.scheduler"
LABEL_APP_ID = "torchx_ext.app_id"
LABEL_APP_NAME = "torchx_ext.app_name"
LABEL_ROLE = "torchx_ext.role"
LABEL_REPLICA = "torchx_ext.replica_id"
LABEL_POLICY = "torchx_ext.policy"
"""The role's policy, whole (``RolePolicy.to_text``)."""
LABEL_ROLE_REPLICAS = "torchx_ext.role_replicas"
LABEL_MIN_REPLICAS = "torchx_ext.min_replicas"
LABEL_MAX_RETRIES = "torchx_ext.max_retries"
"""What containers created before ``LABEL_POLICY`` carry instead (read, no longer written)."""
LABEL_WHOLE_APP = "torchx_ext.restarts_whole_app"
"""On a replica of a role of retry_policy APPLICATION (torchx's default) in an app of several
replicas: its failure starts every container of the app again (``snapshot.restart_app_if_failed``)."""
LABEL_GRACE = "torchx_ext.cancel_grace"
LABEL_IMAGE = "torchx_ext.image"


@dataclass(frozen=True)
class Mount:
    kind: str
    """bind, volume or device."""
    source: str
    target: str
    read_only: bool = False
    permissions: str = "rwm"
    """Devices only: cgroup permissions."""


@dataclass(frozen=True)
class ContainerRequest:
    name: str
    """Container name, hostname and network alias."""
    role: str
    replica_id: int
    image: str
    command: tuple[str, ...]
    """The exact argv: entrypoint then arguments; no shell in between."""
    env: dict[str, str]
    labels: dict[str, str]
    cpuset_cpus: str | None
    cpuset_mems: str | None
    gpus: tuple[int, ...]
    gpu_vendor: str | None
    memory_mb: int | None
    shm_mb: int
    nano_cpus: int | None
    """Only when not pinned to a cpuset: pinning is the CPU policy then."""
    mounts: tuple[Mount, ...]
    policy: RolePolicy
    """Its role's (``common/role_policy.py``): kept on the container as one label (``labels_on_engine``)."""
    privileged: bool = False
    whole_app: bool = False
    """Retried with the whole app (``LABEL_WHOLE_APP``): the engine restarts it on its own never."""
    health_probe: tuple[str, ...] = ()
    """The HEALTHCHECK's argv, for a replica that runs our launcher: it fails once the launcher has
    not touched its liveness file for 10 s (frozen or hung); the job's watcher then kills it."""

    def labels_on_engine(self) -> dict[str, str]:
        """Its labels and its role's policy as labels: what describe, the watcher and a restart
        read back from the engine (``view.ContainerView``)."""
        return {**self.labels, LABEL_POLICY: self.policy.to_text(), **({LABEL_WHOLE_APP: "1"} if self.whole_app else {})}


@dataclass(frozen=True)
class DockerJobRequest:
    app_id: str
    network: str
    containers: tuple[ContainerRequest, ...]
    cancel_grace_s: int
    slices: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def images(self) -> tuple[str, ...]:
        return tuple(sorted({container.image for container in self.containers}))

    def __str__(self) -> str:
        return describe_request(self)


def build_request(
    app: specs.AppDef,
    *,
    app_id: str,
    topology: Topology | None,
    shm_size: str = "auto",
    cancel_grace_s: int = 10,
    gpu_vendor: str | None = None,
    host_env: Mapping[str, str] | None = None,
    copy_env: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    privileged: bool = False,
) -> DockerJobRequest:
    """The containers to create for ``app``; ``topology`` None turns placement off. As torchx's
    local_docker: ``copy_env``'s globs pick variables of ``host_env`` (the submitter's), ``env``
    sets more, and a role's own env wins over both; ``privileged`` for every container."""
    given_env = {**copied_env(host_env or {}, copy_env), **(env or {})}
    total = sum(role.num_replicas for role in app.roles)
    slices = slice_host(topology, total, gpu_vendor) if topology is not None else []
    vendor = _vendor(topology, gpu_vendor)
    names = _container_names(app, app_id)
    policies = policies_of(app)
    containers = []
    position = 0
    for role in app.roles:
        policy = policies[role.name]
        memory_mb = role.resource.memMB if role.resource.memMB > 0 else None
        shm = shm_mb(shm_size, memory_mb, parse_size_mb, "the replica's")
        for replica_id in range(role.num_replicas):
            values = specs.macros.Values(img_root="", app_id=app_id, replica_id=str(replica_id), rank0_env=RANK0_HOST_ENV)
            resolved = values.apply(role)
            piece = slices[position] if slices else None
            position += 1
            containers.append(
                ContainerRequest(
                    name=names[(role.name, replica_id)],
                    role=role.name,
                    replica_id=replica_id,
                    image=role.image,
                    command=(resolved.entrypoint, *resolved.args),
                    env={
                        **given_env,
                        RANK0_HOST_ENV: names[(app.roles[0].name, 0)],  # torchx's rank 0, for every role
                        RDZV_HOST_ENV: names[(role.name, 0)],  # the role's own rendezvous
                        ERROR_FILE_ENV: ERROR_FILE,
                        REPLICA_ENV: f"{role.name}/{replica_id}",
                        **({LIVENESS_FILE_ENV: LIVENESS_FILE} if runs_our_launcher(resolved.entrypoint, resolved.args) else {}),
                        **_gpu_env(role, piece, vendor),
                        **shutdown_timeout_env(cancel_grace_s),
                        **resolved.env,
                    },
                    labels={
                        LABEL_SCHEDULER: SCHEDULER,
                        LABEL_APP_ID: app_id,
                        LABEL_APP_NAME: app.name,
                        LABEL_ROLE: role.name,
                        LABEL_REPLICA: str(replica_id),
                        LABEL_GRACE: str(cancel_grace_s),
                        LABEL_IMAGE: role.image,
                    },
                    cpuset_cpus=format_cpulist(piece.cpus) if piece else None,
                    cpuset_mems=_mems(piece, topology),
                    gpus=_gpus(role, piece, vendor),
                    gpu_vendor=vendor if role.resource.gpu > 0 else None,
                    memory_mb=memory_mb,
                    shm_mb=shm,
                    nano_cpus=int(role.resource.cpu * 1e9) if piece is None and role.resource.cpu > 0 else None,
                    mounts=tuple(_mount(mount, role.name) for mount in role.mounts) + device_mounts(role),
                    policy=policy,
                    privileged=privileged,
                    whole_app=policy.restarts_whole_app(app_replicas(app)),
                    health_probe=tuple(probe_command(LIVENESS_FILE, python=resolved.entrypoint))
                    if runs_our_launcher(resolved.entrypoint, resolved.args) else (),
                )
            )
    return DockerJobRequest(
        app_id=app_id,
        network=app_id,
        containers=tuple(containers),
        cancel_grace_s=cancel_grace_s,
        slices=tuple(piece.describe() for piece in slices),
        warnings=tuple(sorted({warning for piece in slices for warning in piece.warnings}))
        + tuple(_gpu_warnings(app, slices)) + tuple(_device_warnings(app)),
    )


def copied_env(host_env: Mapping[str, str], patterns: Sequence[str]) -> dict[str, str]:
    """The submitter's variables whose names match one of ``patterns`` (shell globs, as fnmatch)."""
    return {name: value for name, value in host_env.items()
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)}


def device_mounts(role: specs.Role) -> tuple[Mount, ...]:
    """The host devices a role's ``resource.devices`` names, mounted as torchx mounts them: EFA as
    ``/dev/infiniband/uverbsN``, Neuron as ``/dev/neuronN``, N from 0."""
    mounts = []
    for device, count in sorted((role.resource.devices or {}).items()):
        pattern = DEVICE_PATHS.get(device)
        if pattern is not None:
            mounts += [Mount("device", pattern.format(index), pattern.format(index)) for index in range(int(count))]
    return tuple(mounts)


def _device_warnings(app: specs.AppDef) -> list[str]:
    return [f"role {role.name!r}: device {device!r} is not one local_docker mounts ({', '.join(DEVICE_PATHS)}): "
            "left out" for role in app.roles for device in sorted(role.resource.devices or {}) if device not in DEVICE_PATHS]


def describe_request(request: DockerJobRequest) -> str:
    """The dry-run text: the network, the slices, then every container's placement and argv."""
    lines = [f"app_id: {request.app_id}", f"network: {request.network} (bridge, one per job)"]
    lines += [f"slice {text}" for text in request.slices]
    lines += [f"warning: {text}" for text in request.warnings]
    for container in request.containers:
        memory = f"{container.memory_mb}m" if container.memory_mb else "no limit"
        gpus = ",".join(map(str, container.gpus)) or "-"
        lines.append(
            f"{container.role}/{container.replica_id}: container={container.name} image={container.image} "
            f"cpuset_cpus={container.cpuset_cpus or 'all'} cpuset_mems={container.cpuset_mems or 'all'} "
            f"gpus={gpus} memory={memory} shm={container.shm_mb}m (counted in memory) "
            f"restarts={container.policy.max_retries}{' (of the whole app)' if container.whole_app else ''}"
            f"{' privileged' if container.privileged else ''}"
        )
        lines.append(f"  command: {list(container.command)!r}")
        if container.health_probe:
            lines.append(f"  healthcheck: {list(container.health_probe)!r} every {HEALTH_INTERVAL_S} s, "
                         f"unhealthy after {HEALTH_RETRIES} failures")
        lines += [f"  env {key}={value!r}" for key, value in sorted(container.env.items())]
        lines += [
            f"  mount {mount.kind} {mount.source} -> {mount.target}{' (read-only)' if mount.read_only else ''}"
            for mount in container.mounts
        ]
    return "\n".join(lines)


def parse_size_mb(text: str, what: str) -> int:
    """Docker's size forms (``512m``, ``2g``, bytes) in MiB, rounded up."""
    match = re.fullmatch(r"\s*(\d+)\s*([bkmg]?)b?\s*", text.lower())
    if match is None or int(match[1]) == 0:
        raise InvalidArgumentError(f"invalid {what} {text!r}: expected {SHM_FORMS}")
    scale = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match[2]]
    return -(-int(match[1]) * scale // (1 << 20))


def _container_names(app: specs.AppDef, app_id: str) -> dict[tuple[str, int], str]:
    names: dict[tuple[str, int], str] = {}
    for role in app.roles:
        slug = re.sub(r"[^a-z0-9-]+", "-", role.name.lower()).strip("-") or "role"
        for replica_id in range(role.num_replicas):
            room = HOSTNAME_MAX - len(app_id) - len(str(replica_id)) - 2
            name = f"{app_id}-{slug[:room].rstrip('-') or 'r'}-{replica_id}"
            if name in names.values():
                raise InvalidArgumentError(
                    f"roles of app {app.name!r} give the same container name {name!r} (role names are cut to fit "
                    f"{HOSTNAME_MAX}-character hostnames): give the roles names that differ in their first characters"
                )
            names[(role.name, replica_id)] = name
    return names


def _vendor(topology: Topology | None, gpu_vendor: str | None) -> str:
    if gpu_vendor is not None:
        return gpu_vendor
    if topology is not None and not topology.gpus_of("nvidia") and topology.gpus_of("amd"):
        return "amd"
    return "nvidia"


def _mems(piece: ReplicaSlice | None, topology: Topology | None) -> str | None:
    if piece is None or topology is None or not piece.numa_nodes:
        return None
    return format_cpulist(piece.numa_nodes)


def _gpus(role: specs.Role, piece: ReplicaSlice | None, vendor: str) -> tuple[int, ...]:
    wanted = max(role.resource.gpu, 0)
    if wanted == 0:
        return ()
    if piece is None:
        return tuple(range(wanted))  # no placement: the first ones, as docker --gpus N picks
    # A named resource describes a whole host; replicas sharing one get its GPUs divided, as
    # local_cwd divides them (the launcher then refuses more processes than GPUs it sees).
    return piece.gpus[:wanted]


def _gpu_warnings(app: specs.AppDef, slices: list[ReplicaSlice]) -> list[str]:
    warnings = []
    position = 0
    for role in app.roles:
        for replica_id in range(role.num_replicas):
            if slices and 0 < len(slices[position].gpus) < role.resource.gpu:
                warnings.append(
                    f"{role.name}/{replica_id} gets GPUs {slices[position].cuda_visible_devices} "
                    f"({len(slices[position].gpus)} of the {role.resource.gpu} its role asks for): "
                    "its replicas share one host"
                )
            elif slices and role.resource.gpu > 0 and not slices[position].gpus:
                raise InvalidArgumentError(
                    f"role {role.name!r} asks for {role.resource.gpu} GPUs per replica but replica slice "
                    f"{slices[position].describe()!r} has none: fewer replicas per host, or "
                    "-cfg slice_replicas=False to let the engine pick"
                )
            position += 1
    return warnings


def _gpu_env(role: specs.Role, piece: ReplicaSlice | None, vendor: str) -> dict[str, str]:
    # AMD's devices are passed whole (/dev/kfd, /dev/dri), so the ROCm runtime is told which ones
    # are this replica's. NVIDIA's runtime shows a container only its devices, numbered from 0;
    # NVIDIA_VISIBLE_DEVICES (what the runtime itself reads) tells the launcher which of the
    # host's GPUs, in sysfs, they are.
    if role.resource.gpu <= 0:
        return {}
    name = "ROCR_VISIBLE_DEVICES" if vendor == "amd" else "NVIDIA_VISIBLE_DEVICES"
    return {name: ",".join(map(str, _gpus(role, piece, vendor)))}


def _mount(mount: object, role: str) -> Mount:
    if isinstance(mount, specs.BindMount):
        return Mount("bind", mount.src_path, mount.dst_path, mount.read_only)
    if isinstance(mount, specs.VolumeMount):
        return Mount("volume", mount.src, mount.dst_path, mount.read_only)
    if isinstance(mount, specs.DeviceMount):
        return Mount("device", mount.src_path, mount.dst_path, permissions=mount.permissions)
    raise InvalidArgumentError(f"role {role!r}: unsupported mount {mount!r}: expected a bind, volume or device mount")

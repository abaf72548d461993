"""The pod template every backend runs a role's replicas with, built purely from the AppDef.

NUMA-aligned pods ask for integer CPUs and memory with requests equal to limits (Guaranteed
QoS: what a kubelet's static CPU manager and Topology Manager pin to NUMA nodes). /dev/shm is
a memory-backed emptyDir. Arguments and env values are escaped against the kubelet's
``$(VAR)`` expansion; the replica id becomes the one reference the backend's controller
defines on each pod (``PodAddressing.index_reference``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.resources import GPU_VENDOR, K8S_INSTANCE_TYPE, NUMA_NODES
from torchx_ext.liveness import probe_command, runs_our_launcher, training_probe_command
from torchx_ext.replica_env import ERROR_FILE_ENV, LIVENESS_FILE_ENV, RANK0_HOST_ENV, RDZV_HOST_ENV, shutdown_timeout_env
from torchx_ext.schedulers.common.checks import shm_mb
from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.options import ManifestOptions, parse_quantity_mb, parse_toleration
from torchx_ext.schedulers.kubernetes.overlay import apply_pod_overlay

# The kubelet keeps what a container writes here as its termination message (at most 4 KiB),
# readable through the API after the pod ended: the launcher's error report goes there.
TERMINATION_LOG = "/dev/termination-log"
EFA_DEVICE = "vpc.amazonaws.com/efa"
FIELD_PATH = "[FIELD_PATH]"
TORCHX_IMAGE_ENV = "TORCHX_IMAGE"
"""torchx's: the image the pod runs (by digest once a workspace image is pushed)."""
_INDEX_MARK = "\x00torchx-ext-index\x00"
LIVENESS_FILE = "/tmp/torchx_ext_liveness"
# The launcher touches its liveness file every second from its start; the probe fails once the
# file is 10 s old. Two failures 2 s apart: one slow probe on a loaded node is not a frozen replica.
# 5 s: the launcher's first beat comes before its imports (a slow start is vouched for by its
# starting beat, and a missing file fails only a stopped launcher), so only the interpreter's own start is waited for.
LIVENESS_PROBE = {"initialDelaySeconds": 5, "periodSeconds": 2, "timeoutSeconds": 10, "failureThreshold": 2,
                  # A frozen launcher answers no SIGTERM: the pod's grace period would only delay its kill.
                  "terminationGracePeriodSeconds": 5}
SPARE_PROBE = {"periodSeconds": 2, "timeoutSeconds": 10, "failureThreshold": 4}
"""A frozen replica's probes time out (fail) too: its pod must not look like a waiting spare, so
readiness needs more failures in a row than liveness needs to kill it. A spare shows within ~8 s."""
UNREACHABLE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
UNREACHABLE_TOLERATION_S = 10
"""How long a pod stays bound to a node that stopped answering once the node controller has
tainted it (Kubernetes' default is 300 s): then the pod is evicted and replaced like a lost one."""


@dataclass(frozen=True)
class PodAddressing:
    """Where a role's pods are found: rank 0's DNS name and the ``$(VAR)`` holding the replica id."""

    rank0_host: str
    """torchx's rank 0: the first role's replica 0."""
    index_reference: str
    subdomain: str | None = None
    """Set on the pod when the backend does not set it itself."""
    rdzv_host: str = ""
    """The role's own replica 0, which hosts its rendezvous (``rank0_host`` when empty)."""


def pod_template(app: specs.AppDef, role: specs.Role, policy: RolePolicy, app_id: str, addressing: PodAddressing,
                 options: ManifestOptions, labels: dict[str, str]) -> dict[str, Any]:
    """``{"metadata": ..., "spec": ...}`` of the role's pods; InvalidArgumentError names bad input."""
    # An injected istio sidecar never exits, so a Job's pod would never complete (torchx's reason too).
    template = {
        "metadata": {"labels": labels, "annotations": {names.ANNOTATION_ROLE_NAME: role.name,
                                                       names.ANNOTATION_ISTIO_SIDECAR: "false"}},
        "spec": _pod_spec(app, role, policy, app_id, addressing, options),
    }
    apply_pod_overlay(template, role)
    return template


def _pod_spec(app: specs.AppDef, role: specs.Role, policy: RolePolicy, app_id: str, addressing: PodAddressing,
              options: ManifestOptions) -> dict[str, Any]:
    values = specs.macros.Values(img_root="", app_id=app_id, replica_id=_INDEX_MARK, rank0_env=RANK0_HOST_ENV)
    resolved = values.apply(role)
    aligned = _aligned(role, options)
    memory_mb = _memory_limit_mb(role, aligned, options)
    shm = shm_mb(options.shm_size, memory_mb, parse_quantity_mb, "the role's")
    ours = runs_our_launcher(resolved.entrypoint, resolved.args)
    env = {
        RANK0_HOST_ENV: addressing.rank0_host,
        RDZV_HOST_ENV: addressing.rdzv_host or addressing.rank0_host,
        ERROR_FILE_ENV: TERMINATION_LOG,
        # No REPLICA_ENV: the index's variable is defined after ours, so $(...) would stay literal;
        # the pod's host name names the replica.
        **({LIVENESS_FILE_ENV: LIVENESS_FILE} if ours else {}),
        TORCHX_IMAGE_ENV: role.image,
        **shutdown_timeout_env(options.cancel_grace_s),
        **resolved.env,
    }
    for key in env:
        if not key or "=" in key:
            raise InvalidArgumentError(f"role {role.name!r}: invalid environment variable name {key!r}: "
                                       "expected a non-empty name without '='")
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm}Mi"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for position, mount in enumerate(role.mounts):
        volume, volume_mount = _volume(mount, role.name, f"mount-{position}")
        volumes.append(volume)
        mounts.append(volume_mount)
    container: dict[str, Any] = {
        "name": re.sub(r"[^a-z0-9-]+", "-", role.name.lower()).strip("-")[: names.NAME_MAX].strip("-") or "main",
        "image": role.image,
        "command": [_literal(resolved.entrypoint, addressing)],
        "args": [_literal(arg, addressing) for arg in resolved.args],
        "env": [_env_var(key, value, addressing) for key, value in env.items()],
        "resources": _resources(role, aligned, memory_mb, options),
        "volumeMounts": mounts,
        **({"ports": [{"name": name, "containerPort": port} for name, port in role.port_map.items()]}
           if role.port_map else {}),
        # The launcher's report when it wrote one, else the end of the output.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": security_context(options),
    }
    if ours:
        # A frozen or hung replica never exits: the kubelet kills it, and the pod (restartPolicy
        # Never) fails and is replaced as a lost replica is.
        container["livenessProbe"] = {"exec": {"command": probe_command(LIVENESS_FILE, python=resolved.entrypoint)},
                                      **LIVENESS_PROBE}
        if policy.has_spares:
            # A hot spare's pod runs and is not ready (the Service publishes not-ready pods anyway).
            container["readinessProbe"] = {
                "exec": {"command": training_probe_command(LIVENESS_FILE, python=resolved.entrypoint)}, **SPARE_PROBE}
    if options.image_pull_policy:
        container["imagePullPolicy"] = options.image_pull_policy
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        **({"subdomain": addressing.subdomain} if addressing.subdomain else {}),
        # Every Service of the namespace as env vars: noise in the worker's environment.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": options.cancel_grace_s,
        "containers": [container],
        "volumes": volumes,
    }
    node_selector = dict(options.node_selector)
    instance_type = role.resource.capabilities.get(K8S_INSTANCE_TYPE)
    if instance_type:
        node_selector.setdefault(K8S_INSTANCE_TYPE, str(instance_type))
    if node_selector:
        pod["nodeSelector"] = node_selector
    tolerations: list[dict[str, Any]] = [parse_toleration(text) for text in options.tolerations]
    given = {toleration.get("key") for toleration in tolerations}
    tolerations += [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": UNREACHABLE_TOLERATION_S}
                    for key in UNREACHABLE_TAINTS if key not in given]
    pod["tolerations"] = tolerations
    if options.service_account:
        pod["serviceAccountName"] = options.service_account
    if options.priority_class:
        pod["priorityClassName"] = options.priority_class
    if options.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": secret} for secret in options.image_pull_secrets]
    return pod


def security_context(options: ManifestOptions) -> dict[str, Any]:
    """What Pod Security "restricted" asks of a container. Training needs no privilege, capability
    or unusual system call (CPU and memory binding act on the process itself; GPUs and EFA come
    from device plugins), so all of it is set; the user only where given, since the image must
    have one that is not root."""
    context: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                               "seccompProfile": {"type": "RuntimeDefault"}}
    if options.run_as_user is not None:
        context.update(runAsNonRoot=True, runAsUser=options.run_as_user)
    return context


def _env_var(name: str, value: str, addressing: PodAddressing) -> dict[str, Any]:
    # torchx's placeholder: "[FIELD_PATH]metadata.name" is the pod's own field, read by the kubelet.
    if value.startswith(FIELD_PATH):
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": value[len(FIELD_PATH):]}}}
    return {"name": name, "value": _literal(value, addressing)}


def _literal(value: str, addressing: PodAddressing) -> str:
    # Doubling every "$" makes the kubelet's $(VAR) expansion give the value back byte for byte.
    return value.replace("$", "$$").replace(_INDEX_MARK, addressing.index_reference)


def _memory_limit_mb(role: specs.Role, aligned: bool, options: ManifestOptions) -> int | None:
    # Aligned pods' limits equal their requests, which must leave the kubelet its reserve.
    if role.resource.memMB <= 0:
        return None
    limit = role.resource.memMB - (options.reserved_memmb if aligned else 0)
    return limit if limit > 0 else None


def _aligned(role: specs.Role, options: ManifestOptions) -> bool:
    if options.numa_aligned is not None:
        return options.numa_aligned
    return bool(role.resource.capabilities.get(NUMA_NODES))


def _resources(role: specs.Role, aligned: bool, memory_limit_mb: int | None,
               options: ManifestOptions) -> dict[str, dict[str, str]]:
    """torchx's requests: the role's CPU and memory less ``reserved_millicpu`` and ``reserved_memmb``
    (a whole host's named resource would never fit beside the kubelet), its memory as the limit.
    Ours differ on purpose in two ways: no CPU limit (CFS quotas throttle a training loop's bursts)
    unless NUMA-aligned, where requests equal limits (Guaranteed QoS, which the static CPU manager needs)."""
    resource = role.resource
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if aligned:
        if resource.cpu <= 0 or memory_limit_mb is None:
            raise InvalidArgumentError(
                f"role {role.name!r}: NUMA-aligned pods need a cpu and memMB to request (cpu={resource.cpu}, "
                f"memMB={resource.memMB}, less reserved_memmb={options.reserved_memmb}): give a named resource (-h), "
                "a smaller -cfg reserved_memmb, or -cfg numa_aligned=False")
        cpus = max(1, math.floor((resource.cpu * 1000 - options.reserved_millicpu) / 1000))
        requests = limits = {"cpu": str(cpus), "memory": f"{memory_limit_mb}Mi"}
    else:
        if resource.cpu > 0:
            requests["cpu"] = f"{max(int(resource.cpu * 1000) - options.reserved_millicpu, 0)}m"
        if memory_limit_mb is not None:
            requests["memory"] = f"{max(memory_limit_mb - options.reserved_memmb, 0)}Mi"
            limits["memory"] = f"{memory_limit_mb}Mi"
    extended: dict[str, str] = {}
    if resource.gpu > 0:
        vendor = str(resource.capabilities.get(GPU_VENDOR) or "nvidia")
        extended[options.gpu_resource or f"{vendor}.com/gpu"] = str(resource.gpu)
    for device, count in resource.devices.items():
        extended[device] = str(count)
    if options.efa_device_count is not None:  # torchx's override: 0 takes EFA away, N asks for N
        extended.pop(EFA_DEVICE, None)
        if options.efa_device_count > 0:
            extended[EFA_DEVICE] = str(options.efa_device_count)
    requests = {**requests, **extended}
    limits = {**limits, **extended}
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def _volume(mount: object, role: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if isinstance(mount, specs.BindMount):
        volume_mount = {"name": name, "mountPath": mount.dst_path}
        if mount.read_only:
            volume_mount["readOnly"] = True
        return {"name": name, "hostPath": {"path": mount.src_path}}, volume_mount
    if isinstance(mount, specs.VolumeMount):
        volume_mount = {"name": name, "mountPath": mount.dst_path}
        if mount.read_only:
            volume_mount["readOnly"] = True
        return {"name": name, "persistentVolumeClaim": {"claimName": mount.src}}, volume_mount
    if isinstance(mount, specs.DeviceMount):
        raise InvalidArgumentError(
            f"role {role!r}: device mount {mount.src_path} would need a privileged host-path mount on Kubernetes: "
            "ask for the device as an extended resource instead (a named resource's devices, e.g. "
            "vpc.amazonaws.com/efa, served by the cluster's device plugin)")
    raise InvalidArgumentError(f"role {role!r}: unsupported mount {mount!r}: expected a bind or volume mount")

"""What `kubernetes` creates for an app, built purely from its AppDef: a headless Service and
one Indexed ``batch/v1`` Job per role.

A role's replica id is its pod's completion index; its pods are ``{job}-{index}`` under the
Service (``subdomain``), so the rank-0 host is ``{job}-0.{service}``, resolvable before the
pod is ready (``publishNotReadyAddresses``). ``max_retries`` is each index's own backoff
(``backoffLimitPerIndex``); with none the first failed pod fails the Job (``podFailurePolicy``
FailJob); failed pods are replaced only once fully terminated (``podReplacementPolicy``).
An elastic role (``-j MIN:MAX``) gets MAX pods; up to MAX - MIN indexes may fail for good
(``maxFailedIndexes``) and index 0 decides success (``successPolicy``).

NUMA-aligned pods ask for integer CPUs and memory with requests equal to limits (Guaranteed
QoS: what a kubelet's static CPU manager and Topology Manager pin to NUMA nodes). Nothing
here talks to the API.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.resources import GPU_VENDOR, K8S_INSTANCE_TYPE, NUMA_NODES
from torchx_ext.schedulers.common.error_file import ERROR_FILE_ENV
from torchx_ext.schedulers.kubernetes import names

RANK0_HOST_ENV = "TORCHX_RANK0_HOST"
# The kubelet keeps what a container writes here as its termination message (at most 4 KiB),
# readable through the API after the pod ended: the launcher's error report goes there.
TERMINATION_LOG = "/dev/termination-log"
# Kubelets keep some CPU for themselves: a whole host's named resource would never fit.
RESERVED_MILLICPU = 100
DEFAULT_SHM_NO_LIMIT_MB = 2048
SHM_FORMS = "'auto', or a size such as 512Mi, 2Gi, 512m, 2g"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_FORMS = "KEY=VALUE:EFFECT, KEY:EFFECT (any value) or KEY=VALUE (any effect)"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Kubernetes expands $(VAR) in command, args and env values; the index of the pod is the
# only value a template cannot hold, so the replica id macro becomes that reference.
_INDEX_REFERENCE = "$(JOB_COMPLETION_INDEX)"
_INDEX_MARK = "\x00torchx-ext-index\x00"


@dataclass(frozen=True)
class KubernetesOptions:
    namespace: str = "default"
    queue: str | None = None
    """A Kueue LocalQueue: Jobs are created suspended, Kueue admits (unsuspends) them."""
    service_account: str | None = None
    priority_class: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    image_pull_policy: str | None = None
    shm_size: str = "auto"
    numa_aligned: bool | None = None
    """None: when the role's named resource describes a NUMA host."""
    image_pull_timeout_s: int = 300
    cancel_grace_s: int = 30


@dataclass(frozen=True)
class AppManifests:
    app_id: str
    namespace: str
    service: dict[str, Any]
    jobs: tuple[dict[str, Any], ...]

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [self.service, *self.jobs]

    def to_yaml(self) -> str:
        import yaml

        text: str = yaml.safe_dump_all(self.objects, sort_keys=False, width=120)
        return text

    def __str__(self) -> str:
        return self.to_yaml()


def build_manifests(app: specs.AppDef, *, app_id: str, options: KubernetesOptions) -> AppManifests:
    """The objects ``kubernetes`` creates for ``app``; InvalidArgumentError names bad input."""
    names.check_dns_label(app_id, "app id")
    names.check_dns_label(options.namespace, "namespace")
    if options.image_pull_policy is not None and options.image_pull_policy not in PULL_POLICIES:
        raise InvalidArgumentError(
            f"invalid image_pull_policy {options.image_pull_policy!r}: expected one of {', '.join(PULL_POLICIES)}")
    tolerations = [parse_toleration(text) for text in options.tolerations]
    job_names = names.job_names(app_id, [(role.name, role.num_replicas) for role in app.roles])
    labels = {names.LABEL_APP_ID: app_id, names.LABEL_APP_NAME: names.label_value(app.name) or "app"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app_id, "namespace": options.namespace, "labels": dict(labels),
                     "annotations": {names.ANNOTATION_APP_NAME: app.name}},
        "spec": {
            "clusterIP": "None",
            # Ranks look up rank 0 before its pod is ready (it is never "ready" otherwise).
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_APP_ID: app_id},
        },
    }
    jobs = tuple(
        _job(app, role, job_names[role.name], app_id, labels, options, tolerations) for role in app.roles
    )
    return AppManifests(app_id, options.namespace, service, jobs)


def _job(
    app: specs.AppDef,
    role: specs.Role,
    job_name: str,
    app_id: str,
    app_labels: dict[str, str],
    options: KubernetesOptions,
    tolerations: list[dict[str, str]],
) -> dict[str, Any]:
    if not role.image:
        raise InvalidArgumentError(f"role {role.name!r} has no image: give one with --image (a registry image the "
                                   "cluster's nodes can pull)")
    replicas = role.num_replicas
    if replicas < 1:
        raise InvalidArgumentError(f"role {role.name!r} has {replicas} replicas: expected 1 or more")
    min_replicas = role.min_replicas if role.min_replicas is not None else replicas
    if not 1 <= min_replicas <= replicas:
        raise InvalidArgumentError(
            f"role {role.name!r}: min_replicas {min_replicas} is not within 1..{replicas} (num_replicas)")
    labels = {**app_labels, names.LABEL_ROLE: names.label_value(role.name) or "role"}
    job_labels = dict(labels)
    if options.queue:
        job_labels[names.LABEL_KUEUE_QUEUE] = options.queue
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
        "backoffLimitPerIndex": role.max_retries,
        "maxFailedIndexes": replicas - min_replicas,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": _failure_rules(role, elastic=min_replicas < replicas)},
    }
    if min_replicas < replicas:
        spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    if options.queue:
        spec["suspend"] = True
    spec["template"] = {
        "metadata": {"labels": labels, "annotations": {names.ANNOTATION_ROLE_NAME: role.name}},
        "spec": _pod_spec(app, role, job_name, app_id, options, tolerations),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": options.namespace,
            "labels": job_labels,
            "annotations": {
                names.ANNOTATION_APP_NAME: app.name,
                names.ANNOTATION_ROLE_NAME: role.name,
                names.ANNOTATION_MIN_REPLICAS: str(min_replicas),
                names.ANNOTATION_PULL_TIMEOUT: str(options.image_pull_timeout_s),
            },
        },
        "spec": spec,
    }


def _failure_rules(role: specs.Role, elastic: bool) -> list[dict[str, Any]]:
    # A pod evicted or preempted (DisruptionTarget) is not the program's failure: replaced
    # without counting against max_retries.
    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    if role.max_retries == 0 and not elastic:
        rules.append({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}})
    return rules


def _pod_spec(
    app: specs.AppDef,
    role: specs.Role,
    job_name: str,
    app_id: str,
    options: KubernetesOptions,
    tolerations: list[dict[str, str]],
) -> dict[str, Any]:
    values = specs.macros.Values(img_root="", app_id=app_id, replica_id=_INDEX_MARK, rank0_env=RANK0_HOST_ENV)
    resolved = values.apply(role)
    aligned = _aligned(role, options)
    memory_mb = role.resource.memMB if role.resource.memMB > 0 else None
    shm_mb = _shm_mb(options.shm_size, memory_mb)
    env = {
        RANK0_HOST_ENV: f"{names.pod_hostname(job_name, 0)}.{app_id}",
        ERROR_FILE_ENV: TERMINATION_LOG,
        **resolved.env,
    }
    for key in env:
        if not key or "=" in key:
            raise InvalidArgumentError(f"role {role.name!r}: invalid environment variable name {key!r}: "
                                       "expected a non-empty name without '='")
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_mb}Mi"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for position, mount in enumerate(role.mounts):
        volume, volume_mount = _volume(mount, role.name, f"mount-{position}")
        volumes.append(volume)
        mounts.append(volume_mount)
    container: dict[str, Any] = {
        "name": re.sub(r"[^a-z0-9-]+", "-", role.name.lower()).strip("-")[: names.NAME_MAX].strip("-") or "main",
        "image": role.image,
        "command": [_literal(resolved.entrypoint)],
        "args": [_literal(arg) for arg in resolved.args],
        "env": [{"name": key, "value": _literal(value)} for key, value in env.items()],
        "resources": _resources(role, aligned, memory_mb),
        "volumeMounts": mounts,
        # The launcher's report when it wrote one, else the end of the output.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if options.image_pull_policy:
        container["imagePullPolicy"] = options.image_pull_policy
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": app_id,
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
    if tolerations:
        pod["tolerations"] = tolerations
    if options.service_account:
        pod["serviceAccountName"] = options.service_account
    if options.priority_class:
        pod["priorityClassName"] = options.priority_class
    if options.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": secret} for secret in options.image_pull_secrets]
    return pod


def _literal(value: str) -> str:
    # Doubling every "$" makes the kubelet's $(VAR) expansion give the value back byte for byte.
    return value.replace("$", "$$").replace(_INDEX_MARK, _INDEX_REFERENCE)


def _aligned(role: specs.Role, options: KubernetesOptions) -> bool:
    if options.numa_aligned is not None:
        return options.numa_aligned
    return bool(role.resource.capabilities.get(NUMA_NODES))


def _resources(role: specs.Role, aligned: bool, memory_mb: int | None) -> dict[str, dict[str, str]]:
    resource = role.resource
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if aligned:
        if resource.cpu <= 0 or memory_mb is None:
            raise InvalidArgumentError(
                f"role {role.name!r}: NUMA-aligned pods need a cpu and memMB to request (cpu={resource.cpu}, "
                f"memMB={resource.memMB}): give a named resource (-h) or -cfg numa_aligned=False")
        cpus = max(1, math.floor((resource.cpu * 1000 - RESERVED_MILLICPU) / 1000))
        requests = limits = {"cpu": str(cpus), "memory": f"{memory_mb}Mi"}
    else:
        if resource.cpu > 0:
            requests["cpu"] = f"{max(int(resource.cpu * 1000) - RESERVED_MILLICPU, 100)}m"
        if memory_mb is not None:
            requests["memory"] = limits["memory"] = f"{memory_mb}Mi"
    extended: dict[str, str] = {}
    if resource.gpu > 0:
        vendor = str(resource.capabilities.get(GPU_VENDOR) or "nvidia")
        extended[f"{vendor}.com/gpu"] = str(resource.gpu)
    for device, count in resource.devices.items():
        extended[device] = str(count)
    requests = {**requests, **extended}
    limits = {**limits, **extended}
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def _shm_mb(shm_size: str, memory_mb: int | None) -> int:
    # /dev/shm is a memory-backed emptyDir whose pages count against the container's memory
    # limit: half of it leaves the processes the other half.
    if shm_size.strip().lower() == "auto":
        return max(64, memory_mb // 2) if memory_mb else DEFAULT_SHM_NO_LIMIT_MB
    shm_mb = parse_quantity_mb(shm_size, "shm_size")
    if memory_mb is not None and shm_mb > memory_mb:
        raise InvalidArgumentError(
            f"shm_size {shm_size!r} ({shm_mb} MiB) is more than the role's memory limit ({memory_mb} MiB), "
            "which /dev/shm counts against: give a smaller shm_size, 'auto', or more memMB")
    return shm_mb


def parse_quantity_mb(text: str, what: str) -> int:
    """A size as Kubernetes (``512Mi``, ``2Gi``, ``1G``) or Docker (``512m``, ``2g``) writes it,
    in MiB rounded up."""
    match = re.fullmatch(r"\s*(\d+)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T|m|g|b|B)?\s*", text)
    if match is None or int(match[1]) == 0:
        raise InvalidArgumentError(f"invalid {what} {text!r}: expected {SHM_FORMS}")
    scale = {None: 1, "b": 1, "B": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 1 << 20, "g": 1 << 30}[match[2]]
    return -(-int(match[1]) * scale // (1 << 20))


def parse_toleration(text: str) -> dict[str, str]:
    """``KEY=VALUE:EFFECT``, ``KEY:EFFECT`` or ``KEY=VALUE`` as a pod toleration."""
    match = re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_./]*)(?:=([-A-Za-z0-9_.]*))?(?::(\w+))?", text.strip())
    if match is None or (match[2] is None and match[3] is None) or (match[3] and match[3] not in EFFECTS):
        raise InvalidArgumentError(
            f"invalid toleration {text!r}: expected {TOLERATION_FORMS}, EFFECT one of {', '.join(EFFECTS)}")
    toleration = {"key": match[1], "operator": "Equal" if match[2] is not None else "Exists"}
    if match[2] is not None:
        toleration["value"] = match[2]
    if match[3]:
        toleration["effect"] = match[3]
    return toleration


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

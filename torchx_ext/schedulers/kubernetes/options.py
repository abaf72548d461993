"""kubernetes' ``-cfg`` (``run_opts``, as torchx passes it: ``KubernetesOpts``) and what it says
about an app, checked before anything is built or sent (``ManifestOptions``)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from torchx.specs import runopts

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.scheduler import CancelGraceOpts, add_cancel_grace_opt

BACKEND_NAMES = ("job", "jobset", "volcano")
"""What runs a role's pods: an Indexed batch/v1 Job, a JobSet (jobset.x-k8s.io) or a Volcano Job
(batch.volcano.sh)."""
SHM_FORMS = "'auto', or a size such as 512Mi, 2Gi, 512m, 2g"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
NETWORK_PEER_FORMS = "LABEL=VALUE (pods of the namespace), namespace:NAME (every pod of a namespace) or a CIDR such as 10.0.0.0/8"
TOLERATION_FORMS = "KEY=VALUE:EFFECT, KEY:EFFECT (any value) or KEY=VALUE (any effect)"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEFAULT_VOLCANO_QUEUE = "default"
DEFAULT_PULL_TIMEOUT_S = 300
DEFAULT_CANCEL_GRACE_S = 30
# torchx's: what the kubelet keeps of a node for itself, left out of a role's requests.
DEFAULT_RESERVED_MILLICPU = 100
DEFAULT_RESERVED_MEMMB = 1024
IMAGE_HINT = "a registry image the cluster's nodes can pull"
GPU_RESOURCE_EXAMPLES = ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb")
_EXTENDED_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class ManifestOptions:
    """``-cfg`` (torchx's ``KubernetesOpts``) checked and with its defaults: what the manifests
    are built from."""

    namespace: str = "default"
    backend: str = "job"
    queue: str | None = None
    """``job``/``jobset``: a Kueue LocalQueue (created suspended, Kueue admits them);
    ``volcano``: the Volcano queue (``default`` when None)."""
    service_account: str | None = None
    priority_class: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    image_pull_policy: str | None = None
    shm_size: str = "auto"
    numa_aligned: bool | None = None
    """None: when the role's named resource describes a NUMA host."""
    gpu_resource: str | None = None
    """The extended resource a role's GPUs are asked as (``nvidia.com/mig-1g.10gb``); None: the
    named resource's vendor's ``{vendor}.com/gpu``, ``nvidia.com/gpu`` without one."""
    image_pull_timeout_s: int = DEFAULT_PULL_TIMEOUT_S
    cancel_grace_s: int = DEFAULT_CANCEL_GRACE_S
    reserved_millicpu: int = DEFAULT_RESERVED_MILLICPU
    reserved_memmb: int = DEFAULT_RESERVED_MEMMB
    efa_device_count: int | None = None
    """torchx's override of ``vpc.amazonaws.com/efa``: None keeps the role's, 0 removes it, N asks for N."""
    validate_spec: bool = True
    """Each object goes through the API server's dry run before any is created."""
    network_policy: bool = False
    """A NetworkPolicy lets only the app's own pods (and ``network_peers``) reach its pods."""
    network_peers: tuple[str, ...] = ()
    """More that may reach them (``NETWORK_PEER_FORMS``); any turns the policy on."""
    run_as_user: int | None = None
    """The user id the containers run as, with ``runAsNonRoot`` (Pod Security "restricted"); None:
    the image's user."""

    def check(self) -> None:
        for name in ("reserved_millicpu", "reserved_memmb", "efa_device_count"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidArgumentError(f"invalid {name} {value!r}: expected an integer of 0 or more")
        if self.run_as_user is not None and (isinstance(self.run_as_user, bool) or not isinstance(self.run_as_user, int)
                                             or self.run_as_user < 1):
            raise InvalidArgumentError(f"invalid run_as_user {self.run_as_user!r}: expected a user id of 1 or more, "
                                       "one the image has (root, 0, is what Pod Security 'restricted' refuses)")
        if self.backend not in BACKEND_NAMES:
            raise InvalidArgumentError(f"invalid backend {self.backend!r}: expected one of {', '.join(BACKEND_NAMES)} "
                                       "(job: no CRDs needed; jobset: JobSet installed; volcano: Volcano installed)")
        if self.image_pull_policy is not None and self.image_pull_policy not in PULL_POLICIES:
            raise InvalidArgumentError(
                f"invalid image_pull_policy {self.image_pull_policy!r}: expected one of {', '.join(PULL_POLICIES)}")
        for text in self.tolerations:
            parse_toleration(text)
        for text in self.network_peers:
            parse_network_peer(text)
        if self.gpu_resource is not None and (not _EXTENDED_RESOURCE.fullmatch(self.gpu_resource)
                                              or "kubernetes.io/" in self.gpu_resource):
            raise InvalidArgumentError(
                f"invalid gpu_resource {self.gpu_resource!r}: expected an extended resource DOMAIN/NAME as the "
                f"cluster's device plugin offers it, e.g. {', '.join(GPU_RESOURCE_EXAMPLES)}")


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


def parse_network_peer(text: str) -> dict[str, object]:
    """A ``network_peers`` entry as a NetworkPolicy peer."""
    given = text.strip()
    namespace = given[len("namespace:"):] if given.startswith("namespace:") else None
    key, _, value = given.partition("=")
    if namespace is not None:
        if namespace and _LABEL_VALUE.fullmatch(namespace):
            return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    elif "=" in given:
        if _LABEL_KEY.fullmatch(key) and _LABEL_VALUE.fullmatch(value):
            return {"podSelector": {"matchLabels": {key: value}}}
    elif "/" in given:
        try:
            return {"ipBlock": {"cidr": str(ipaddress.ip_network(given, strict=False))}}
        except ValueError:
            pass
    raise InvalidArgumentError(f"invalid network_peers entry {text!r}: expected {NETWORK_PEER_FORMS}")


_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


class KubernetesOpts(CancelGraceOpts, total=False):
    """``-cfg`` as torchx passes it; ``options.ManifestOptions`` is what it is checked into."""

    namespace: Optional[str]
    backend: Optional[str]
    queue: Optional[str]
    service_account: Optional[str]
    priority_class: Optional[str]
    node_selector: Optional[Dict[str, str]]
    tolerations: Optional[List[str]]
    image_pull_secrets: Optional[List[str]]
    image_pull_policy: Optional[str]
    shm_size: Optional[str]
    numa_aligned: Optional[bool]
    gpu_resource: Optional[str]
    image_pull_timeout: Optional[int]
    image_repo: Optional[str]
    quiet: Optional[bool]
    validate_spec: Optional[bool]
    reserved_millicpu: Optional[int]
    reserved_memmb: Optional[int]
    efa_device_count: Optional[int]
    network_policy: Optional[bool]
    network_peers: Optional[List[str]]
    run_as_user: Optional[int]


def run_opts() -> runopts:
    opts = runopts()
    opts.add("namespace", type_=str, default=None,
             help="namespace of the Jobs (default: the kubeconfig context's, else 'default')")
    opts.add("backend", type_=str, default="job",
             help="what runs the pods: job (Indexed Jobs, no CRDs needed), jobset (a JobSet: gang restarts; "
             "JobSet installed) or volcano (a Volcano Job: gang scheduling; Volcano installed)")
    opts.add("queue", type_=str, default=None,
             help="job/jobset: a Kueue LocalQueue (created suspended, started when Kueue admits them); "
             "volcano: the Volcano queue (default: 'default')")
    opts.add("service_account", type_=str, default=None, help="service account the pods run as")
    opts.add("priority_class", type_=str, default=None, help="PriorityClass of the pods")
    opts.add("node_selector", type_=Dict[str, str], default=None,
             help="node labels the pods require, as key:value,key2:value2")
    opts.add("tolerations", type_=List[str], default=None,
             help="taints the pods tolerate: KEY=VALUE:EFFECT, KEY:EFFECT or KEY=VALUE, comma-separated")
    opts.add("image_pull_secrets", type_=List[str], default=None,
             help="Secrets (in the namespace) to pull the image with, comma-separated")
    opts.add("image_pull_policy", type_=str, default=None, help="Always, IfNotPresent or Never")
    opts.add("shm_size", type_=str, default="auto",
             help="/dev/shm of each pod (memory-backed, counted in its memory limit): 'auto' (half the "
             "role's memMB, 2Gi without one) or a size such as 8Gi")
    opts.add("numa_aligned", type_=bool, default=None,
             help="integer CPU and memory requests equal to limits (Guaranteed pods, which a kubelet with "
             "the static CPU manager and a Topology Manager pins to NUMA nodes); default: when the named "
             "resource (-h) describes a NUMA host")
    opts.add("gpu_resource", type_=str, default=None,
             help="the extended resource GPUs are asked as, as the cluster's device plugin offers them: "
             f"{', '.join(GPU_RESOURCE_EXAMPLES)} (a MIG profile); default: the named resource's "
             "vendor's, else nvidia.com/gpu")
    opts.add("image_pull_timeout", type_=int, default=DEFAULT_PULL_TIMEOUT_S,
             help="seconds a pod's image may fail to pull before the job is stopped as FAILED")
    add_cancel_grace_opt(opts, DEFAULT_CANCEL_GRACE_S, "pods are stopped (terminationGracePeriodSeconds)")
    opts.add("validate_spec", type_=bool, default=True,
             help="put every object through the API server's dry run before creating any (at submission; "
             "--dryrun itself stays offline)")
    opts.add("reserved_millicpu", type_=int, default=DEFAULT_RESERVED_MILLICPU,
             help="CPU (millicores) of a node the kubelet keeps: left out of each pod's CPU request")
    opts.add("reserved_memmb", type_=int, default=DEFAULT_RESERVED_MEMMB,
             help="memory (MiB) of a node the kubelet keeps: left out of each pod's memory request (and of "
             "its limit when NUMA-aligned, where they are equal)")
    opts.add("efa_device_count", type_=int, default=None,
             help="EFA devices (vpc.amazonaws.com/efa) per pod over the named resource's: 0 asks for none")
    opts.add("network_policy", type_=bool, default=False,
             help="a NetworkPolicy lets only the app's own pods (and network_peers) reach its pods: its "
             "rendezvous store has no authentication (enforced where the network plugin supports it)")
    opts.add("network_peers", type_=List[str], default=None,
             help=f"also let these reach the app's pods (turns network_policy on): {NETWORK_PEER_FORMS}, "
             "comma-separated")
    opts.add("run_as_user", type_=int, default=None,
             help="user id the containers run as, with runAsNonRoot (what Pod Security 'restricted' also asks; "
             "the image needs that user); default: the image's user")
    return opts

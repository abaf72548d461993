"""The resource types served, with their names as URLs and messages spell them, their validation, and
the defaults the real API server fills in on create (a scheduler may read them back)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.kubernetes.apiserver import validation
from tests.kubernetes.apiserver.crd_validation import crd_errors
from tests.kubernetes.apiserver.errors import FieldError

Obj = dict[str, Any]

JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class ResourceType:
    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    validate: Callable[[Obj], list[FieldError]]
    default: Callable[[Obj], None]
    # What DELETE does without a propagationPolicy (batch/v1 Jobs orphan their pods, for compatibility).
    default_propagation: str = "Background"

    @property
    def key(self) -> str:
        """Unique among the served types (batch/v1 and Volcano both have ``jobs``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def _no_defaults(obj: Obj) -> None:
    pass


def default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    for container in spec.get("containers") or []:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        image = str(container.get("image", ""))
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("resources", {})


def default_pod(pod: Obj) -> None:
    default_pod_spec(pod.setdefault("spec", {}))
    pod.setdefault("status", {"phase": "Pending", "qosClass": qos_class(pod["spec"])})


def qos_class(spec: Obj) -> str:
    requests_limits = [((c.get("resources") or {}).get("requests") or {}, (c.get("resources") or {}).get("limits") or {})
                       for c in spec.get("containers") or []]
    if all(not r and not lim for r, lim in requests_limits):
        return "BestEffort"
    guaranteed = all(lim.get(k) is not None and str({**lim, **r}.get(k)) == str(lim.get(k))
                     for r, lim in requests_limits for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


def default_job(job: Obj) -> None:
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    default_pod_spec(template.setdefault("spec", {}))
    job.setdefault("status", {})


def add_job_selector(job: Obj) -> None:
    """After the uid is known: the selector and template labels that tie the Job to its pods."""
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    spec = job["spec"]
    spec.setdefault("selector", {"matchLabels": {CONTROLLER_UID: uid}})
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.update({CONTROLLER_UID: uid, JOB_NAME: name, "controller-uid": uid, "job-name": name})


def default_service(service: Obj) -> None:
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    service.setdefault("status", {"loadBalancer": {}})


NAMESPACES = ResourceType("namespaces", "Namespace", "", "v1", False,
                          lambda o: validation.name_errors((o.get("metadata") or {}).get("name"), "label1123"),
                          lambda o: o.setdefault("status", {"phase": "Active"}) and None)
PODS = ResourceType("pods", "Pod", "", "v1", True, validation.pod_errors, default_pod)
SERVICES = ResourceType("services", "Service", "", "v1", True, validation.service_errors, default_service)
JOBS = ResourceType("jobs", "Job", "batch", "v1", True, validation.job_errors, default_job, "Orphan")
NETWORK_POLICIES = ResourceType("networkpolicies", "NetworkPolicy", "networking.k8s.io", "v1", True,
                                validation.schema_errors, _no_defaults)



def _custom_object(obj: Obj) -> list[FieldError]:
    return validation.name_errors((obj.get("metadata") or {}).get("name"), "label1123")


def _with_status(obj: Obj) -> None:
    obj.setdefault("status", {})


# Custom resources (their CRDs "installed"): what JobSet, Volcano and Kueue serve; their
# controllers' stand-ins are in crd_controllers.py.
def _checked(schema: Callable[[Obj], list[FieldError]]) -> Callable[[Obj], list[FieldError]]:
    return lambda obj: _custom_object(obj) + schema(obj)


JOBSETS = ResourceType("jobsets", "JobSet", "jobset.x-k8s.io", "v1alpha2", True,
                       _checked(crd_errors("JobSet")), _with_status)
VOLCANO_JOBS = ResourceType("jobs", "Job", "batch.volcano.sh", "v1alpha1", True,
                            _checked(crd_errors("Job")), _with_status)
VOLCANO_COMMANDS = ResourceType("commands", "Command", "bus.volcano.sh", "v1alpha1", True, _custom_object, _no_defaults)
WORKLOADS = ResourceType("workloads", "Workload", "kueue.x-k8s.io", "v1beta1", True, _custom_object, _with_status)
LOCAL_QUEUES = ResourceType("localqueues", "LocalQueue", "kueue.x-k8s.io", "v1beta1", True, _custom_object, _with_status)
CUSTOM = (JOBSETS, VOLCANO_JOBS, VOLCANO_COMMANDS, WORKLOADS, LOCAL_QUEUES)
# Volcano's queues are cluster-scoped; Volcano installs one named "default".
VOLCANO_QUEUES = ResourceType("queues", "Queue", "scheduling.volcano.sh", "v1beta1", False, _custom_object, _with_status)

BY_KEY = {t.key: t for t in (NAMESPACES, PODS, SERVICES, JOBS, NETWORK_POLICIES, *CUSTOM, VOLCANO_QUEUES)}

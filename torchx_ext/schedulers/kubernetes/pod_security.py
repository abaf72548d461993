"""Whether the namespace admits the app's pods, asked before anything is created.

Pod Security admission (a namespace labelled ``pod-security.kubernetes.io/enforce``) checks pods
only: the Jobs, JobSets and Volcano Jobs whose pods it refuses are created and then start none,
and only an event says why. So each role's pod is first created as a dry run, which goes through
the same admission (and any admission webhook the cluster has); a refusal is one line, naming
what to change. A user not allowed to create pods (403 from RBAC) is not stopped here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.client import Cluster

HINTS = (
    ("runAsNonRoot", "give -cfg run_as_user=UID, a user id the image has"),
    ("hostPath", "a bind mount is a hostPath volume: mount a PersistentVolumeClaim (a volume mount) instead"),
    ("privileged", "leave privileged out of the role's pod overlay"),
)


def check_pods_admitted(cluster: Cluster, namespace: str, objects: tuple[dict[str, Any], ...]) -> None:
    """InvalidArgumentError when the namespace's admission refuses a role's pod."""
    for template in pod_templates(objects):
        metadata = template.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
               "metadata": {"generateName": "torchx-ext-admission-", "labels": metadata.get("labels") or {}}}
        refusal = cluster.admission_refusal(namespace, pod)
        if refusal is not None:
            role = (metadata.get("annotations") or {}).get(names.ANNOTATION_ROLE_NAME, "")
            start = refusal.find("violates PodSecurity")  # the rest names the dry run's pod
            hints = [hint for word, hint in HINTS if word in refusal]
            raise InvalidArgumentError(f"role {role!r}: namespace {namespace!r} refuses its pods: "
                                       f"{refusal[max(start, 0):]}" + "".join(f"; {hint}" for hint in hints))


def pod_templates(objects: tuple[dict[str, Any], ...]) -> Iterator[dict[str, Any]]:
    """Every pod template (``{"metadata", "spec": {"containers"}}``) in the objects, whatever the backend."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("spec"), dict) and "containers" in value["spec"]:
                found.append(value)
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(list(objects))
    return iter(found)

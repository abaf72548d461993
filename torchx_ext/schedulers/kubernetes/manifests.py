"""What `kubernetes` creates for an app, built purely from its AppDef, per backend:

- ``job``: a headless Service and one Indexed ``batch/v1`` Job per role;
- ``jobset``: one JobSet (``jobset.py``) whose replicated jobs are those same Jobs;
- ``volcano``: one Volcano Job (``volcano.py``) with a task per role.

Every backend runs the same pod template (``pods.py``). In the ``job`` backend a role's replica
id is its pod's completion index; its pods are ``{job}-{index}`` under the Service
(``subdomain``), so the rank-0 host is ``{job}-0.{service}``, resolvable before the pod is ready
(``publishNotReadyAddresses``). ``max_retries`` is each index's own backoff
(``backoffLimitPerIndex``); with none the first failed pod fails the Job (``podFailurePolicy``
FailJob); failed pods are replaced only once fully terminated (``podReplacementPolicy``).
An elastic role (``-j MIN:MAX``) gets MAX pods; up to MAX - MIN indexes may fail for good
(``maxFailedIndexes``) and index 0 decides success (``successPolicy``). Nothing here talks to
the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.options import KubernetesOptions
from torchx_ext.schedulers.kubernetes.pods import Placement, pod_template

__all__ = ["AppManifests", "KubernetesOptions", "build_manifests"]
JOB_INDEX_REFERENCE = "$(JOB_COMPLETION_INDEX)"


@dataclass(frozen=True)
class AppManifests:
    app_id: str
    namespace: str
    backend: str
    objects: tuple[dict[str, Any], ...]
    """In creation order (what a later object needs exists first)."""

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
    options.check()
    for role in app.roles:
        check_role(role)
    if options.backend == "jobset":
        from torchx_ext.schedulers.kubernetes.jobset import jobset

        return AppManifests(app_id, options.namespace, "jobset", (jobset(app, app_id, options),))
    if options.backend == "volcano":
        from torchx_ext.schedulers.kubernetes.volcano import volcano_job

        return AppManifests(app_id, options.namespace, "volcano", (volcano_job(app, app_id, options),))
    job_names = names.job_names(app_id, [(role.name, role.num_replicas) for role in app.roles])
    jobs = tuple(
        indexed_job(app, role, job_names[role.name], app_id, options,
                    Placement(f"{names.pod_hostname(job_names[role.name], 0)}.{app_id}", JOB_INDEX_REFERENCE, app_id))
        for role in app.roles
    )
    return AppManifests(app_id, options.namespace, "job", (headless_service(app, app_id, options.namespace), *jobs))


def app_labels(app: specs.AppDef, app_id: str) -> dict[str, str]:
    return {names.LABEL_APP_ID: app_id, names.LABEL_APP_NAME: names.label_value(app.name) or "app"}


def role_labels(app: specs.AppDef, role: specs.Role, app_id: str) -> dict[str, str]:
    return {**app_labels(app, app_id), names.LABEL_ROLE: names.label_value(role.name) or "role"}


def headless_service(app: specs.AppDef, app_id: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app_id, "namespace": namespace, "labels": app_labels(app, app_id),
                     "annotations": {names.ANNOTATION_APP_NAME: app.name}},
        "spec": {
            "clusterIP": "None",
            # Ranks look up rank 0 before its pod is ready (it is never "ready" otherwise).
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_APP_ID: app_id},
        },
    }


def check_role(role: specs.Role) -> None:
    if not role.image:
        raise InvalidArgumentError(f"role {role.name!r} has no image: give one with --image (a registry image the "
                                   "cluster's nodes can pull)")
    if role.num_replicas < 1:
        raise InvalidArgumentError(f"role {role.name!r} has {role.num_replicas} replicas: expected 1 or more")
    if not 1 <= min_replicas(role) <= role.num_replicas:
        raise InvalidArgumentError(
            f"role {role.name!r}: min_replicas {role.min_replicas} is not within 1..{role.num_replicas} (num_replicas)")


def min_replicas(role: specs.Role) -> int:
    return int(role.min_replicas) if role.min_replicas is not None else role.num_replicas


def role_annotations(app: specs.AppDef, role: specs.Role, options: KubernetesOptions) -> dict[str, str]:
    return {
        names.ANNOTATION_APP_NAME: app.name,
        names.ANNOTATION_ROLE_NAME: role.name,
        names.ANNOTATION_MIN_REPLICAS: str(min_replicas(role)),
        names.ANNOTATION_PULL_TIMEOUT: str(options.image_pull_timeout_s),
    }


def indexed_job(app: specs.AppDef, role: specs.Role, job_name: str, app_id: str, options: KubernetesOptions,
                placement: Placement, *, gang: bool = False) -> dict[str, Any]:
    """A role's Indexed Job. ``gang``: inside a JobSet, whose ``failurePolicy`` restarts every
    Job when one fails: a non-elastic role's Job then fails at its first failed pod."""
    replicas = role.num_replicas
    least = min_replicas(role)
    elastic = least < replicas
    labels = role_labels(app, role, app_id)
    job_labels = dict(labels)
    if options.queue and not gang:
        job_labels[names.LABEL_KUEUE_QUEUE] = options.queue
    retries = 0 if gang and not elastic else role.max_retries
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
        "backoffLimitPerIndex": retries,
        "maxFailedIndexes": replicas - least,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": _failure_rules(retries, elastic)},
    }
    if elastic:
        spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    if options.queue and not gang:
        spec["suspend"] = True
    spec["template"] = pod_template(app, role, app_id, placement, options, labels)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": options.namespace,
            "labels": job_labels,
            "annotations": role_annotations(app, role, options),
        },
        "spec": spec,
    }


def _failure_rules(retries: int, elastic: bool) -> list[dict[str, Any]]:
    # A pod evicted or preempted (DisruptionTarget) is not the program's failure: replaced
    # without counting against max_retries.
    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    if retries == 0 and not elastic:
        rules.append({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}})
    return rules

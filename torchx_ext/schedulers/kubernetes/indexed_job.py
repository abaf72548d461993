"""The ``job`` backend: a headless Service and one Indexed ``batch/v1`` Job per role, built purely
from the AppDef (the ``jobset`` backend runs these same Jobs, one per replicated job).

A role's replica id is its pod's completion index; its pods are ``{job}-{index}`` under the
Service (``subdomain``), so the rank-0 host is ``{job}-0.{service}``, resolvable before the pod
is ready (``publishNotReadyAddresses``). ``max_retries`` is each index's own backoff
(``backoffLimitPerIndex``); with none the first failed pod fails the Job (``podFailurePolicy``
FailJob); failed pods are replaced only once fully terminated (``podReplacementPolicy``).
An elastic role (``-j MIN:MAX``) gets MAX pods; up to MAX - MIN indexes may fail for good
(``maxFailedIndexes``) and index 0 decides success (``successPolicy``).
"""

from __future__ import annotations

from typing import Any

from torchx import specs

from torchx_ext.exit_codes import STUCK
from torchx_ext.liveness import runs_our_launcher
from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.options import ManifestOptions
from torchx_ext.schedulers.kubernetes.pods import PodAddressing, pod_template

JOB_INDEX_REFERENCE = "$(JOB_COMPLETION_INDEX)"


def job_objects(app: specs.AppDef, policies: dict[str, RolePolicy], app_id: str,
                options: ManifestOptions) -> tuple[dict[str, Any], ...]:
    """The Service, then each role's Indexed Job."""
    job_names = names.job_names(app_id, [(role.name, role.num_replicas) for role in app.roles])
    # torchx's rank 0, for every role: the first role's replica 0.
    rank0_host = f"{names.pod_hostname(job_names[app.roles[0].name], 0)}.{app_id}"
    jobs = tuple(
        indexed_job(app, role, policies[role.name], job_names[role.name], app_id, options,
                    PodAddressing(rank0_host, JOB_INDEX_REFERENCE, app_id,
                                  f"{names.pod_hostname(job_names[role.name], 0)}.{app_id}"))
        for role in app.roles
    )
    return (headless_service(app, app_id, options.namespace), *jobs)


def headless_service(app: specs.AppDef, app_id: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app_id, "namespace": namespace, "labels": names.app_labels(app, app_id),
                     "annotations": {names.ANNOTATION_APP_NAME: app.name}},
        "spec": {
            "clusterIP": "None",
            # Ranks look up rank 0 before its pod is ready (it is never "ready" otherwise).
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_APP_ID: app_id},
        },
    }


def indexed_job(app: specs.AppDef, role: specs.Role, policy: RolePolicy, job_name: str, app_id: str,
                options: ManifestOptions, addressing: PodAddressing, *, gang: bool = False) -> dict[str, Any]:
    """A role's Indexed Job. ``gang``: inside a JobSet, whose ``failurePolicy`` restarts every
    Job when one fails: a fixed role of retry_policy APPLICATION (torchx's default) then
    fails its Job at its first failed pod; a REPLICA one keeps the Job's own per-pod retries."""
    replicas, least = policy.num_replicas, policy.min_replicas
    short = policy.carries_on_short
    labels = names.role_labels(app, role, app_id)
    job_labels = dict(labels)
    if options.queue and not gang:
        job_labels[names.LABEL_KUEUE_QUEUE] = options.queue
    whole_app = gang and not short and policy.restarts_app
    retries = 0 if whole_app else role.max_retries
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
        "backoffLimitPerIndex": retries,
        "maxFailedIndexes": replicas - least,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": _failure_rules(retries, short, ours=runs_our_launcher(role.entrypoint, role.args),
                                                      gang=gang)},
    }
    if short:
        spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    if options.queue and not gang:
        spec["suspend"] = True
    spec["template"] = pod_template(app, role, policy, app_id, addressing, options, labels)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": options.namespace,
            "labels": job_labels,
            "annotations": names.role_annotations(app, role, policy, options.image_pull_timeout_s),
        },
        "spec": spec,
    }


def _failure_rules(retries: int, carries_on_short: bool, ours: bool, gang: bool) -> list[dict[str, Any]]:
    # A pod evicted or preempted (DisruptionTarget) is not the program's failure: replaced
    # without counting against max_retries.
    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    # Our launcher's attempts kept hanging or failing at one point (exit_codes.STUCK): no pod of it
    # again. In a JobSet the index fails instead, so that the Job's reason (MaxFailedIndexesExceeded)
    # tells the JobSet's failurePolicy to fail, not restart, every Job (jobset.STUCK_RULE).
    if ours and not gang and retries > 0:
        rules.append({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [STUCK]}})
    if ours and gang:
        rules.append({"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [STUCK]}})
    if retries == 0 and not carries_on_short:
        rules.append({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}})
    return rules

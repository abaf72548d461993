"""The ``jobset`` backend: one JobSet (``jobset.x-k8s.io/v1alpha2``) per app, a replicated job
per role whose one Job is the ``job`` backend's Indexed Job for that role.

The JobSet controller names the Job ``{app}-{role}-0`` and its pods' hostnames
``{app}-{role}-0-{index}`` under a headless Service of its own named after the JobSet
(``network``: DNS hostnames, published before the pods are ready). A role's ``retry_policy``
decides what a failure restarts, as torchx defines it: APPLICATION (torchx's default) fails the
role's Job at its first failed pod, and ``failurePolicy.maxRestarts`` (the least ``max_retries``
of those roles) restarts every Job of the app; REPLICA keeps the Job's per-pod retries (the
failed pod alone is replaced, as on the ``job`` backend), and its Job fails the JobSet only once
they are spent. An elastic role keeps its per-pod retries too and tolerates MAX - MIN failed
indexes, its rendezvous absorbing them. The
app succeeds when the first role's Job does (index 0 for an elastic role, every index
otherwise). With ``queue`` it is created suspended, labelled for Kueue.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torchx import specs

from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.common.states import State
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.view import KubernetesJobView, failure_message, read_job
from torchx_ext.schedulers.kubernetes.indexed_job import JOB_INDEX_REFERENCE, indexed_job
from torchx_ext.schedulers.kubernetes.options import ManifestOptions
from torchx_ext.schedulers.kubernetes.pods import PodAddressing

API_VERSION = "jobset.x-k8s.io/v1alpha2"
# Our cancel of a Kueue-queued JobSet gives its Jobs an active deadline they are past (Kueue
# un-suspends a JobSet it admitted): the JobSet must then fail, not restart them.
CANCEL_RULE = {"name": "cancelledByTorchx", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}
STUCK_RULE = {"name": "stuckAtOnePoint", "action": "FailJobSet", "onJobFailureReasons": ["MaxFailedIndexesExceeded"]}
"""Our launcher stopped restarting (exit_codes.STUCK): its gang Job's index failed (indexed_job),
and restarting every Job would only repeat it. A role of retry_policy REPLICA whose per-pod
retries are spent fails its Job for the same reason: the JobSet ends then too, not restarted."""


def child_job_name(app_id: str, replicated_job: str) -> str:
    return f"{app_id}-{replicated_job}-0"


def jobset(app: specs.AppDef, policies: dict[str, RolePolicy], app_id: str, options: ManifestOptions) -> dict[str, Any]:
    roles = [(role.name, role.num_replicas) for role in app.roles]
    # The Job name gets "-0" after the replicated job's name, and JobSet's webhook wants even its
    # pods' names ({job}-{index}-{5 random}) to be DNS labels: eight characters kept for those.
    replicated = {role: job[len(app_id) + 1:] for role, job in names.job_names(app_id, roles, reserve=8).items()}
    replicated_jobs = []
    # torchx's rank 0, for every role: the first role's replica 0.
    rank0_job = child_job_name(app_id, replicated[app.roles[0].name])
    for role in app.roles:
        job_name = child_job_name(app_id, replicated[role.name])
        addressing = PodAddressing(f"{names.pod_hostname(rank0_job, 0)}.{app_id}", JOB_INDEX_REFERENCE,
                                   rdzv_host=f"{names.pod_hostname(job_name, 0)}.{app_id}")
        job = indexed_job(app, role, policies[role.name], job_name, app_id, options, addressing, gang=True)
        replicated_jobs.append({
            "name": replicated[role.name],
            "replicas": 1,
            "template": {"metadata": {"labels": job["metadata"]["labels"],
                                      "annotations": job["metadata"]["annotations"]},
                         "spec": job["spec"]},
        })
    labels = names.app_labels(app, app_id)
    if options.queue:
        labels[names.LABEL_KUEUE_QUEUE] = options.queue
    spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [replicated[app.roles[0].name]]},
        "failurePolicy": {"maxRestarts": min((policy.max_retries for policy in policies.values()
                                              if policy.restarts_app), default=0),
                          "rules": [CANCEL_RULE, STUCK_RULE]},
        "replicatedJobs": replicated_jobs,
    }
    if options.queue:
        spec["suspend"] = True
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": app_id,
            "namespace": options.namespace,
            "labels": labels,
            "annotations": {names.ANNOTATION_APP_NAME: app.name,
                            names.ANNOTATION_PULL_TIMEOUT: str(options.image_pull_timeout_s)},
        },
        "spec": spec,
    }


def read_jobset(app_id: str, jobset: dict[str, Any] | None, jobs: list[dict[str, Any]],
                pods: list[dict[str, Any]]) -> KubernetesJobView:
    """The app as its JobSet, the JobSet's Jobs and their pods say it is. A Job the JobSet is
    recreating (a gang restart) is read from its template, so the app never looks unknown."""
    if jobset is None:
        return KubernetesJobView(app_id, None, "", (), ())
    meta, spec, status = jobset["metadata"], jobset.get("spec") or {}, jobset.get("status") or {}
    end_annotation = {key: value for key, value in (meta.get("annotations") or {}).items() if key == names.ANNOTATION_END}
    children = {job["metadata"]["name"]: job for job in jobs}
    role_jobs = []
    for replicated in spec.get("replicatedJobs") or []:
        name = child_job_name(app_id, replicated["name"])
        template = replicated.get("template") or {}
        job = children.get(name) or {
            "metadata": {"name": name, "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                         "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                         "creationTimestamp": meta.get("creationTimestamp")},
            "spec": template.get("spec") or {}, "status": {}}
        # Our end is written on the JobSet: its Jobs show it to the reading as if written there.
        job = {**job, "metadata": {**job["metadata"], "annotations": {
            **(job["metadata"].get("annotations") or {}), **end_annotation}}}
        role_jobs.append(job)
    view = read_job(app_id, role_jobs, pods)
    queue = (meta.get("labels") or {}).get(names.LABEL_KUEUE_QUEUE) or ""
    # Kueue's label is the JobSet's (not its Jobs'): each role is queued with it.
    view = dataclasses.replace(view, gang=True, gang_restarts=int(status.get("restarts") or 0),
                               roles=tuple(dataclasses.replace(role, queue=queue) for role in view.roles))
    if view.end is not None:
        # Our end is written with what stops the pods: the JobSet suspended or, when Kueue queues
        # it (and would un-suspend it), its Jobs given a deadline. A Job not stopped so is again.
        stopped = {job["metadata"]["name"] for job in role_jobs
                   if (job.get("spec") or {}).get("activeDeadlineSeconds") or (spec.get("suspend") and not queue)}
        return dataclasses.replace(view, roles=tuple(dataclasses.replace(role, marked=role.job in stopped)
                                                     for role in view.roles))
    if _condition(jobset, "Completed"):
        return dataclasses.replace(view, state=State.SUCCEEDED, message="",
                                   roles=tuple(dataclasses.replace(role, ended=True) for role in view.roles))
    failed = _condition(jobset, "Failed")
    if failed:
        # The failed Job's own account names the replica even when its pod is gone (deleted).
        cause = view.message if view.state is State.FAILED else failure_message(view.failing) if view.failing else ""
        message = "; ".join(text for text in (cause, f"JobSet: {failed.get('message') or failed.get('reason')}") if text)
        return dataclasses.replace(view, state=State.FAILED, message=message,
                                   roles=tuple(dataclasses.replace(role, ended=True) for role in view.roles))
    if spec.get("suspend"):
        waiting = f"waiting for admission by Kueue's LocalQueue {queue!r}" if queue else "suspended"
        return dataclasses.replace(view, state=State.PENDING, message=f"JobSet {app_id} is {waiting}")
    if not jobs and any(int(found.get("ready") or 0) or int(found.get("active") or 0)
                        for found in status.get("replicatedJobsStatus") or []):
        return dataclasses.replace(view, state=State.RUNNING)  # read without its Jobs (a list)
    if view.state is State.FAILED:  # a Job failed: the JobSet restarts them all, or fails
        restarts = (spec.get("failurePolicy") or {}).get("maxRestarts", 0)
        return dataclasses.replace(view, state=State.RUNNING, message=(
            f"restarting every pod ({view.gang_restarts} of {restarts} restarts so far) after: {view.message}"))
    return view


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((found for found in (obj.get("status") or {}).get("conditions") or []
                 if found.get("type") == kind and found.get("status") == "True"), None)

"""What differs per workload kind (the ``backend`` option: job, jobset, volcano) once an app exists:
how it is read, ended, deleted and listed.

Each reads with a constant number of requests (the top object, its Jobs, its pods), whatever
the replica count. Ending writes our end (``common.states.JobEnd``, as ``view.end_annotation`` writes it) on the top object, whose state it
then is whatever the stopped pods exit with, with what stops the pods:

- ``job``: each Job suspended, or, when Kueue queues it (Kueue un-suspends a Job it admitted),
  given an active deadline it is already past;
- ``jobset``: the JobSet suspended, or, when queued, its Jobs given that deadline (the JobSet's
  failure rule for ``DeadlineExceeded`` then fails it instead of restarting them);
- ``volcano``: Volcano's own abort (a ``bus.volcano.sh`` Command, as ``vcctl job suspend``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from torchx_ext.errors import KubernetesError

from torchx_ext.schedulers.common.states import JobEnd, State
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.client import JOBSET, KUEUE_WORKLOAD, VOLCANO_COMMAND, VOLCANO_JOB, Cluster
from torchx_ext.schedulers.kubernetes.jobset import read_jobset
from torchx_ext.schedulers.kubernetes.view import KubernetesJobView, end_annotation, read_job
from torchx_ext.schedulers.kubernetes.volcano import read_volcano

# Past at once, counted from the Job's (re)start: a queued Job fails a second after admission.
_PAST_DEADLINE = {"spec": {"activeDeadlineSeconds": 1}}


class Workload(Protocol):
    name: str

    def view(self, cluster: Cluster, namespace: str, name: str) -> KubernetesJobView: ...

    def end(self, cluster: Cluster, namespace: str, view: KubernetesJobView, end: JobEnd) -> None: ...

    def delete(self, cluster: Cluster, namespace: str, name: str) -> bool: ...

    def apps(self, cluster: Cluster, namespace: str) -> list[tuple[str, State | None]]: ...


def _annotation(end: JobEnd) -> dict[str, Any]:
    return {"metadata": {"annotations": {names.ANNOTATION_END: end_annotation(end)}}}


def app_selector(name: str) -> str:
    return f"{names.LABEL_APP_ID}={name}"


class JobWorkload:
    name = "job"

    def view(self, cluster: Cluster, namespace: str, name: str) -> KubernetesJobView:
        jobs = cluster.jobs(namespace, app_selector(name))
        pods = cluster.pods(namespace, app_selector(name)) if jobs else []
        return _with_kueue_reason(cluster, namespace, read_job(name, jobs, pods), jobs)

    def end(self, cluster: Cluster, namespace: str, view: KubernetesJobView, end: JobEnd) -> None:
        for role in view.roles:
            patch: dict[str, Any]
            if role.ended:  # no pods left to stop
                patch = _annotation(end)
            elif role.queue:
                patch = {**_annotation(end), **_PAST_DEADLINE}
            else:
                patch = {**_annotation(end), "spec": {"suspend": True}}
            cluster.patch_job(role.job, namespace, patch)

    def delete(self, cluster: Cluster, namespace: str, name: str) -> bool:
        found = False
        for job in cluster.jobs(namespace, app_selector(name)):
            found |= cluster.delete("Job", job["metadata"]["name"], namespace)
        return cluster.delete("Service", name, namespace) or found

    def apps(self, cluster: Cluster, namespace: str) -> list[tuple[str, State | None]]:
        by_app: dict[str, list[dict[str, Any]]] = {}
        for job in cluster.jobs(namespace, names.LABEL_APP_ID):
            if any(owner.get("kind") == "JobSet" for owner in job["metadata"].get("ownerReferences") or []):
                continue  # a JobSet's: listed with it
            by_app.setdefault(job["metadata"]["labels"][names.LABEL_APP_ID], []).append(job)
        return [(app, _state(read_job(app, jobs, []))) for app, jobs in by_app.items()]


class JobSetWorkload:
    name = "jobset"

    def view(self, cluster: Cluster, namespace: str, name: str) -> KubernetesJobView:
        jobset = cluster.get_custom(JOBSET, name, namespace)
        if jobset is None:
            return read_jobset(name, None, [], [])
        view = read_jobset(name, jobset, cluster.jobs(namespace, app_selector(name)), cluster.pods(namespace, app_selector(name)))
        return _with_kueue_reason(cluster, namespace, view, [jobset])

    def end(self, cluster: Cluster, namespace: str, view: KubernetesJobView, end: JobEnd) -> None:
        # The end first (it is the app's state whatever follows), then what stops the pods.
        queued = any(role.queue for role in view.roles)
        stop: dict[str, Any] = {} if queued or all(role.ended for role in view.roles) else {"spec": {"suspend": True}}
        cluster.patch_custom(JOBSET, view.app_id, namespace, {**_annotation(end), **stop})
        if not queued:
            return
        for role in view.roles:
            if not role.ended:
                try:
                    cluster.patch_job(role.job, namespace, {**_annotation(end), **_PAST_DEADLINE})
                except KubernetesError as error:
                    if error.status != 404:  # 404: being recreated; the next look stops the new one
                        raise

    def delete(self, cluster: Cluster, namespace: str, name: str) -> bool:
        return cluster.delete_custom(JOBSET, name, namespace)

    def apps(self, cluster: Cluster, namespace: str) -> list[tuple[str, State | None]]:
        return [(jobset["metadata"]["name"], _state(read_jobset(jobset["metadata"]["name"], jobset, [], [])))
                for jobset in cluster.list_custom(JOBSET, namespace, names.LABEL_APP_ID)]


class VolcanoWorkload:
    name = "volcano"

    def view(self, cluster: Cluster, namespace: str, name: str) -> KubernetesJobView:
        job = cluster.get_custom(VOLCANO_JOB, name, namespace)
        return read_volcano(name, job, cluster.pods(namespace, app_selector(name)) if job else [])

    def end(self, cluster: Cluster, namespace: str, view: KubernetesJobView, end: JobEnd) -> None:
        cluster.patch_custom(VOLCANO_JOB, view.app_id, namespace, _annotation(end))
        if all(role.ended for role in view.roles):
            return
        job = cluster.get_custom(VOLCANO_JOB, view.app_id, namespace)
        if job is None:
            return
        owner = {"apiVersion": job["apiVersion"], "kind": "Job", "name": view.app_id,
                 "uid": job["metadata"]["uid"], "controller": True}
        cluster.create_custom(VOLCANO_COMMAND, namespace, {
            "apiVersion": f"{VOLCANO_COMMAND.group}/{VOLCANO_COMMAND.version}", "kind": "Command",
            "metadata": {"generateName": f"{view.app_id}-abortjob-", "namespace": namespace,
                         "ownerReferences": [owner]},
            "target": owner, "action": "AbortJob", "reason": "cancelled by torchx",
            "message": end.message})

    def delete(self, cluster: Cluster, namespace: str, name: str) -> bool:
        return cluster.delete_custom(VOLCANO_JOB, name, namespace)

    def apps(self, cluster: Cluster, namespace: str) -> list[tuple[str, State | None]]:
        return [(job["metadata"]["name"], _state(read_volcano(job["metadata"]["name"], job, [])))
                for job in cluster.list_custom(VOLCANO_JOB, namespace, names.LABEL_APP_ID)]


WORKLOAD_OF_BACKEND: dict[str, Workload] = {workload.name: workload for workload in (JobWorkload(), JobSetWorkload(), VolcanoWorkload())}
"""The workload kind of each value of the kubernetes scheduler's ``backend`` option."""


def _with_kueue_reason(cluster: Cluster, namespace: str, view: KubernetesJobView, owners: list[dict[str, Any]]) -> KubernetesJobView:
    """A queued app Kueue has not admitted says why, as its Workload's QuotaReserved condition
    does (one more request, only while it waits; nothing when the Workloads are not readable)."""
    waiting = {owner["metadata"]["uid"] for owner in owners if (owner.get("spec") or {}).get("suspend")
               and names.LABEL_KUEUE_QUEUE in (owner["metadata"].get("labels") or {})}
    if view.state is not State.PENDING or not waiting:
        return view
    try:
        workloads = cluster.list_custom(KUEUE_WORKLOAD, namespace, names.LABEL_KUEUE_JOB_UID)
    except KubernetesError:  # no RBAC on Kueue's objects: the reason is optional
        return view
    reasons = [f"{condition.get('reason', 'Pending')}: {condition.get('message', '')}".rstrip(": ")
               for workload in workloads
               if (workload["metadata"].get("labels") or {}).get(names.LABEL_KUEUE_JOB_UID) in waiting
               for condition in (workload.get("status") or {}).get("conditions") or []
               if condition.get("type") == "QuotaReserved" and condition.get("status") == "False"]
    if not reasons:
        return view
    return dataclasses.replace(view, message=f"{view.message}: Kueue says {'; '.join(reasons)}")


def _state(view: KubernetesJobView) -> State | None:
    return view.state

"""The ``volcano`` backend: one Volcano Job (``batch.volcano.sh/v1alpha1``) per app, the shape
torchx's builtin scheduler submits (a task per role, scheduler ``volcano``, ``queue``, plugins
``svc`` and ``env``), with our pods.

Volcano names a task's pods ``{app}-{task}-{index}``, which its ``svc`` plugin makes their
hostnames under a headless Service named after the job (published before the pods are ready);
its ``env`` plugin gives each container its index as ``VC_TASK_INDEX``. ``minAvailable`` (every
role's MIN replicas) is the gang: Volcano's scheduler binds none of the pods until that many
can run. A failed or evicted (deleted) pod of a non-elastic role restarts what the role's
``retry_policy`` names: the whole job (APPLICATION: ``RestartJob``), the role's pods (torchx-nightly's
ROLE: ``RestartTask``) or that pod alone (REPLICA: ``RestartPod``, Volcano 1.11 or later, whose
admission refuses the action before). Volcano counts restarts per job (``maxRetry``; it counts
the failure that ends the job as a retry too, hence the one added): the least ``max_retries`` of
the roles, as torchx sets it, where a restart restarts a job or a role; where every restart is one
pod's, ``max_retries`` for each replica of each role, in all, as an Indexed Job's per-index limit
allows (one incident can cost several: the survivors of a lost store host fail too). With no
retries such a pod ends the job (``TerminateJob``), keeping the pods that ended and their logs
(a restart deletes the pods it restarts).
An elastic role has no policy: its failed pods stay failed while its rendezvous goes on with
the others, and Volcano recreates a deleted one, which joins at the next rendezvous.
Volcano records no pod name for any of this: a replica left with no pod when the job failed is
named as lost.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torchx import specs

from torchx_ext.exit_codes import STUCK
from torchx_ext.liveness import runs_our_launcher
from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.common.states import State
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.view import KubernetesJobView, failure_message, read_job
from torchx_ext.schedulers.kubernetes.options import DEFAULT_VOLCANO_QUEUE, ManifestOptions
from torchx_ext.schedulers.kubernetes.pods import PodAddressing, pod_template

API_VERSION = "batch.volcano.sh/v1alpha1"
INDEX_REFERENCE = "$(VC_TASK_INDEX)"


def task_names(app: specs.AppDef, app_id: str) -> dict[str, str]:
    """role name -> task name: pods are ``{app_id}-{task}-{index}``, each a DNS label."""
    jobs = names.job_names(app_id, [(role.name, role.num_replicas) for role in app.roles])
    return {role: job[len(app_id) + 1:] for role, job in jobs.items()}


def _policies(role: specs.Role, policy: RolePolicy) -> list[dict[str, Any]]:
    # A restart deletes every pod, the failed one and its log with it; ending a job instead
    # (TerminateJob) keeps the pods that ended, so a job with no retries left says why it failed.
    # Volcano reports a pod deleted by anyone but itself (a lost node, kubectl delete) as evicted.
    if policy.carries_on_short:
        return []  # its rendezvous goes on without a failed pod; a deleted one Volcano recreates
    action = _restart_action(policy) if role.max_retries else "TerminateJob"
    policies: list[dict[str, Any]] = [{"event": "PodFailed", "action": action},
                                      {"event": "PodEvicted", "action": action}]
    if role.max_retries and runs_our_launcher(role.entrypoint, role.args):
        # Our launcher's attempts kept hanging or failing at one point (exit_codes.STUCK): the job
        # ends. Volcano takes the first policy that matches, by event or by exit code.
        policies.insert(0, {"exitCode": STUCK, "action": "TerminateJob"})
    return policies


def _restart_action(policy: RolePolicy) -> str:
    """What a failed pod restarts, by the role's retry policy (REPLICA, and HOT_SPARE, which this
    backend refuses before, restart the pod alone)."""
    return "RestartJob" if policy.restarts_app else "RestartTask" if policy.restarts_role else "RestartPod"


def _max_retry(policies: dict[str, RolePolicy]) -> int:
    fixed = [policy for policy in policies.values() if not policy.carries_on_short]
    if fixed and all(policy.restarts_in_place for policy in fixed if policy.max_retries):
        return sum(policy.max_retries * policy.num_replicas for policy in fixed) + 1
    return min(policy.max_retries for policy in policies.values()) + 1


def volcano_job(app: specs.AppDef, policies: dict[str, RolePolicy], app_id: str,
                options: ManifestOptions) -> dict[str, Any]:
    tasks = []
    task_of = task_names(app, app_id)
    rank0_host = f"{app_id}-{task_of[app.roles[0].name]}-0.{app_id}"
    for role in app.roles:
        addressing = PodAddressing(rank0_host, INDEX_REFERENCE, rdzv_host=f"{app_id}-{task_of[role.name]}-0.{app_id}")
        policy = policies[role.name]
        template = pod_template(app, role, policy, app_id, addressing, options, names.role_labels(app, role, app_id))
        template["metadata"]["annotations"].update(names.role_annotations(app, role, policy,
                                                                          options.image_pull_timeout_s))
        tasks.append({
            "name": task_of[role.name],
            "replicas": role.num_replicas,
            "minAvailable": policy.min_replicas,
            "policies": _policies(role, policy),
            "template": template,
        })
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": options.queue or DEFAULT_VOLCANO_QUEUE,
        "minAvailable": sum(policy.min_replicas for policy in policies.values()),
        "maxRetry": _max_retry(policies),
        # The svc plugin's Service publishes the pods' names before they are ready: ranks look
        # up rank 0 while it starts.
        "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
        "tasks": tasks,
    }
    if options.priority_class:
        spec["priorityClassName"] = options.priority_class
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {
            "name": app_id,
            "namespace": options.namespace,
            "labels": names.app_labels(app, app_id),
            "annotations": {names.ANNOTATION_APP_NAME: app.name,
                            names.ANNOTATION_PULL_TIMEOUT: str(options.image_pull_timeout_s)},
        },
        "spec": spec,
    }


# Volcano's job phases (batch.volcano.sh/v1alpha1 JobPhase). Those on the way to an end
# (Completing, Terminating, Restarting) are not that end yet: the pods are still being stopped.
PHASES = {
    "Pending": State.PENDING,
    "Running": State.RUNNING,
    "Restarting": State.RUNNING,
    "Completing": State.RUNNING,
    "Terminating": State.RUNNING,
    "Aborting": State.CANCELLED,
    "Aborted": State.CANCELLED,
    "Completed": State.SUCCEEDED,
    "Terminated": State.FAILED,
    "Failed": State.FAILED,
}


def volcano_pod_place(pod: dict[str, Any]) -> tuple[str, str]:
    """(``{job}-{task}``, index) of a Volcano Job's pod, from the labels its controller sets."""
    labels = pod["metadata"].get("labels") or {}
    return f"{labels.get('volcano.sh/job-name', '')}-{labels.get('volcano.sh/task-spec', '')}", labels.get(
        "volcano.sh/task-index", "")


def read_volcano(app_id: str, job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> KubernetesJobView:
    """The app as its Volcano Job's phase and its pods say it is; a phase this code does not
    know reads as what the pods show, never as an end."""
    if job is None:
        return KubernetesJobView(app_id, None, "", (), ())
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    end_annotation = {key: value for key, value in (meta.get("annotations") or {}).items() if key == names.ANNOTATION_END}
    tasks = [{
        "metadata": {"name": f"{app_id}-{task['name']}", "creationTimestamp": meta.get("creationTimestamp"),
                     "annotations": {**(((task.get("template") or {}).get("metadata") or {}).get("annotations") or {}),
                                     **end_annotation}},
        "spec": {"completions": task.get("replicas", 1), "template": task.get("template") or {}},
        "status": {},
    } for task in spec.get("tasks") or []]
    view = read_job(app_id, tasks, pods, volcano_pod_place)
    phase_state = (status.get("state") or {})
    phase = str(phase_state.get("phase") or "Pending")
    view = dataclasses.replace(view, gang=True, gang_restarts=int(status.get("retryCount") or 0))
    state = PHASES.get(phase)
    ended = state is not None and state.terminal
    if ended:
        view = dataclasses.replace(view, roles=tuple(dataclasses.replace(role, ended=True) for role in view.roles))
    if view.end is not None:
        # Our end is written before the abort that stops the pods: until Volcano aborts, it is
        # applied again (the writer may have died between the two).
        aborted = phase in ("Aborting", "Aborted") or ended
        return dataclasses.replace(view, roles=tuple(dataclasses.replace(role, marked=aborted) for role in view.roles))
    said = "; ".join(text for text in (phase_state.get("reason"), phase_state.get("message")) if text)
    detail = f"Volcano Job {app_id} is {phase}" + (f": {said}" if said else "")
    if state is State.FAILED:
        cause = failure_message(view.failing) if view.failing else ""
        return dataclasses.replace(view, state=State.FAILED, message="; ".join(
            text for text in (_lost(view), cause, detail) if text))
    if state is State.SUCCEEDED:
        return dataclasses.replace(view, state=State.SUCCEEDED, message="")
    if state is State.CANCELLED:
        return dataclasses.replace(view, state=State.CANCELLED, message=detail)
    # On the way (or a phase newer than this code): what the pods show, never an end.
    current = state or (view.state if view.state in (State.PENDING, State.RUNNING) else State.RUNNING)
    message = "; ".join(text for text in (detail if phase != "Running" else "", view.message) if text)
    return dataclasses.replace(view, state=current, message=message)


def _lost(view: KubernetesJobView) -> str:
    """The replicas left with no pod in a failed job: deleted or evicted (Volcano removes the
    pods it stops only once one has failed, or on a restart)."""
    keys = [replica.key for replica in view.replicas if not replica.pod]
    if not keys:
        return ""
    if len(keys) == len(view.replicas):
        return f"replicas {', '.join(keys)} have no pod left (deleted, evicted or stopped)"
    return f"replica {keys[0]} lost its pod" if len(keys) == 1 else f"replicas {', '.join(keys)} lost their pods"

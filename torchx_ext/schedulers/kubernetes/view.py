"""An app as its Jobs and pods say it is, read purely from the API's JSON.

``read_job`` takes what two label-selected lists return (the app's Jobs, its pods) and gives
the job's state, each replica's, and a message that says why a job is stuck or failed:
Job conditions first (FailureTarget/Failed, SuccessCriteriaMet/Complete, Suspended), then the
pods (an image that does not pull, a pod no node can take, a kubelet that refused it).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torchx_ext.error_file import parse_error_report
from torchx_ext.liveness import TRAINING_FLAG
from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.common.states import JobEnd, State
from torchx_ext.schedulers.kubernetes import names

PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
STUCK_REASONS = PULL_FAILURES | {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
# Pods a kubelet refused at admission end Failed with one of these reasons.
KUBELET_REJECTIONS = re.compile(r"TopologyAffinityError|OutOf\w+|UnexpectedAdmissionError|NodeAffinity|Evicted")


def end_annotation(end: JobEnd) -> str:
    """``end`` as the value of our end annotation (on an app's top object or its Jobs)."""
    data = {"state": end.state.value, "at": end.at, "message": end.message}
    if end.replica:
        data["replica"] = end.replica
    return json.dumps(data)


def end_from_annotations(annotations: Mapping[str, str]) -> JobEnd | None:
    try:
        data = json.loads(annotations[names.ANNOTATION_END])
        return JobEnd(State(data["state"]), float(data["at"]), str(data.get("message", "")),
                      str(data.get("replica", "")))
    except (KeyError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class ReplicaView:
    role: str
    replica_id: int
    state: State
    pod: str
    """The pod's name; empty when the replica has no pod (yet, or any more)."""
    hostname: str
    exit_code: int | None = None
    finished_at: float | None = None
    reason: str = ""
    """Why it is stuck or how it ended, in the API's words."""
    termination_message: str = ""
    restarts: int = 0
    """Pods of this replica that were replaced."""
    spare: bool = False
    """Running and not ready by our readiness probe: its launcher waits as a hot spare."""

    @property
    def key(self) -> str:
        return f"{self.role}/{self.replica_id}"

    @property
    def root_cause(self) -> str:
        report = parse_error_report(self.termination_message)
        if report is not None and report.message:
            return report.message
        return self.termination_message.strip().splitlines()[-1] if self.termination_message.strip() else ""


@dataclass(frozen=True)
class RoleView:
    name: str
    job: str
    image: str
    replicas: int
    min_replicas: int
    ended: bool = False
    """The Job has finished or is finishing (Complete/SuccessCriteriaMet, Failed/FailureTarget):
    its controller stops its pods."""
    marked: bool = False
    """The Job carries our end (written with what stops it, in one patch)."""
    queue: str = ""
    """The Kueue LocalQueue that admits the Job, if any."""
    elastic: bool = False
    """The role is elastic (``-j MIN:MAX``), not one whose extra replicas are hot spares."""


@dataclass(frozen=True)
class KubernetesJobView:
    app_id: str
    state: State | None
    """None: the app has no Job (it does not exist, or was deleted)."""
    message: str
    roles: tuple[RoleView, ...]
    replicas: tuple[ReplicaView, ...]
    failing: ReplicaView | None = None
    end: JobEnd | None = None
    pull_stuck_since: float | None = None
    """The earliest creation time of a pod whose image does not pull, for the pull timeout."""
    pull_timeout_s: int | None = None
    gang: bool = False
    """A JobSet or Volcano controller stops every role's pods when one fails (no end of ours needed)."""
    gang_restarts: int = 0
    """Restarts of every pod at once (a JobSet's, a Volcano Job's)."""
    replaced_pods: int = 0
    """Pods the Jobs' controller counted as failed and replaced, deleted ones too (which are
    gone from the API, so the replicas' pods no longer show them)."""
    last_failure: str = ""
    """The failed pod replaced last (a deleted one leaves none): replica, pod, exit and cause."""

    @property
    def restarts(self) -> int:
        return self.gang_restarts + max(sum(replica.restarts for replica in self.replicas), self.replaced_pods)

    @property
    def spares(self) -> list[tuple[str, int]]:
        return [(replica.role, replica.replica_id) for replica in self.replicas if replica.spare]


def job_pod_place(pod: dict[str, Any]) -> tuple[str, str]:
    """(Job name, completion index) of an Indexed Job's pod, from the labels its controller sets."""
    labels = pod["metadata"].get("labels") or {}
    return labels.get("batch.kubernetes.io/job-name", labels.get("job-name", "")), labels.get(
        names.LABEL_COMPLETION_INDEX, "")


def read_job(app_id: str, jobs: list[dict[str, Any]], pods: list[dict[str, Any]],
             place: Callable[[dict[str, Any]], tuple[str, str]] = job_pod_place) -> KubernetesJobView:
    """``place``: a pod's (role's Job name, replica index), by the labels of the controller that made it."""
    if not jobs:
        return KubernetesJobView(app_id, None, "", (), ())
    jobs = sorted(jobs, key=lambda job: job["metadata"].get("creationTimestamp") or "")
    # Two ends written at once (a cancel, a describe ending a failure) may each reach some Jobs:
    # the earlier one is the app's, on every reader.
    end = min((found for job in jobs if (found := end_from_annotations(_annotations(job)))),
              key=lambda found: found.at, default=None)
    job_states = [(_job_state(job), job) for job in jobs]
    roles = tuple(_role(job, state) for (state, _), job in job_states)
    by_job = {role.job: role for role in roles}
    newest: dict[tuple[str, int], dict[str, Any]] = {}
    counts: dict[tuple[str, int], int] = {}
    failures: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for pod in pods:
        job_name, index_text = place(pod)
        role = by_job.get(job_name)
        if role is None or not index_text.isdigit():
            continue
        key = (role.name, int(index_text))
        counts[key] = counts.get(key, 0) + 1
        # A pod that ended because it was deleted was stopped: no failure.
        if (pod.get("status") or {}).get("phase") == "Failed" and not pod["metadata"].get("deletionTimestamp"):
            failures.setdefault(key, []).append(pod)
        if key not in newest or _created(pod) >= _created(newest[key]):
            newest[key] = pod
    replicas = []
    replaced_failures: list[ReplicaView] = []
    replaced = 0
    for (state, _), job in job_states:
        role = by_job[job["metadata"]["name"]]
        given_up = _index_set(str((job.get("status") or {}).get("failedIndexes") or ""))
        # Indexes whose newest pod failed and was not replaced (yet, or ever): the Job counts their
        # failures too, and several at once where the replicas end together (a stop every node makes).
        unreplaced = sum(1 for index in range(role.replicas) if index not in given_up
                         and any(pod is newest.get((role.name, index)) for pod in failures.get((role.name, index), [])))
        replaced += _replaced_pods(job, state, unreplaced)
        for index in range(role.replicas):
            key = (role.name, index)
            # The newest pod's failure is a restart only where its replacement is gone: a Job
            # that succeeds deletes the pods still running. Elsewhere it ended the replica, or
            # its replacement is still to come (and then counts as a pod).
            replaced_and_gone = state is State.SUCCEEDED and index not in given_up
            failed = [pod for pod in failures.get(key, []) if pod is not newest.get(key) or replaced_and_gone]
            restarts = max(counts.get(key, 0) - 1, len(failed))
            replicas.append(dataclasses.replace(_replica(role, index, newest.get(key)), restarts=restarts))
            replaced_failures += [_replica(role, index, pod) for pod in failed]
    failing = _failing(replicas, end)
    replicas = [_stopped_by_end(replica, failing, end) for replica in replicas]
    if failing is not None:
        failing = next(replica for replica in replicas if replica.key == failing.key)
    state, message = _app_state(job_states, replicas, end, failing)
    stuck = [replica for replica in replicas if replica.reason.split(":")[0] in PULL_FAILURES]
    stuck_since = min((_created(newest[(replica.role, replica.replica_id)]) for replica in stuck), default=None)
    timeout = next((int(value) for job in jobs if (value := _annotations(job).get(names.ANNOTATION_PULL_TIMEOUT, ""))
                    .isdigit()), None)
    last = max(replaced_failures, key=lambda replica: replica.finished_at or 0.0, default=None)
    return KubernetesJobView(app_id, state, message, roles, tuple(replicas), failing, end,
                   stuck_since if state in (State.PENDING, State.RUNNING) else None, timeout, replaced_pods=replaced,
                   last_failure=failure_message(last) if last is not None else "")


def _replaced_pods(job: dict[str, Any], state: State, unreplaced: int) -> int:
    # The Job's failed count, less the failures that were not replaced: an index given up on, the
    # newest pods that failed (``unreplaced``; a succeeded Job deleted their replacements), and
    # at least the one that failed the whole Job (its pod may be gone from the API).
    status = job.get("status") or {}
    given_up = len(_index_set(str(status.get("failedIndexes") or "")))
    if state is State.SUCCEEDED:
        unreplaced = 0
    elif state is State.FAILED and not given_up:
        unreplaced = max(1, unreplaced)
    return max(0, int(status.get("failed") or 0) - given_up - unreplaced)


def end_due(view: KubernetesJobView, now: float) -> JobEnd | None:
    """The end an app needs from us now, if any: an image that has not pulled within the
    timeout, or a failed app whose other roles' Jobs still run (their controllers only stop
    their own Job's pods)."""
    if view.state is None:
        return None
    if view.end is not None:
        # An end whose patches did not all land (the writer died, the API failed): again.
        return view.end if any(not role.ended and not role.marked for role in view.roles) else None
    timeout = 300 if view.pull_timeout_s is None else view.pull_timeout_s
    if view.pull_stuck_since is not None and now - view.pull_stuck_since > timeout:
        stuck = next(replica for replica in view.replicas if replica.reason.split(":")[0] in PULL_FAILURES)
        return JobEnd(State.FAILED, now, (
            f"replica {stuck.key} (pod {stuck.pod}): its image did not pull within {timeout} s ({stuck.reason}); "
            "the job was stopped: check the image name, the registry and -cfg image_pull_secrets"), replica=stuck.key)
    if view.state is State.FAILED and not view.gang and any(not role.ended for role in view.roles):
        return JobEnd(State.FAILED, now, view.message, replica=view.failing.key if view.failing else "")
    return None


def rfc3339(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    main, _, fraction = text.rstrip("Z").partition(".")
    moment = datetime.datetime.fromisoformat(main).replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp() + (float(f"0.{fraction}") if fraction.isdigit() else 0.0)


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def _created(pod: dict[str, Any]) -> float:
    return rfc3339(pod["metadata"].get("creationTimestamp")) or 0.0


def _role(job: dict[str, Any], state: State) -> RoleView:
    annotations = _annotations(job)
    spec = job.get("spec") or {}
    replicas = int(spec.get("completions") or spec.get("parallelism") or 1)
    policy = RolePolicy.from_text(annotations.get(names.ANNOTATION_POLICY, ""))
    min_text = annotations.get(names.ANNOTATION_MIN_REPLICAS, "")  # a job submitted before the policy annotation
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    return RoleView(
        name=annotations.get(names.ANNOTATION_ROLE_NAME) or job["metadata"]["name"],
        job=job["metadata"]["name"],
        image=str(containers[0].get("image", "")),
        replicas=replicas,
        min_replicas=policy.min_replicas if policy else int(min_text) if min_text.isdigit() else replicas,
        # A Job submitted before the policy annotation: its spares (job backend) read as elastic.
        elastic=policy.is_elastic if policy else min_text.isdigit() and int(min_text) < replicas,
        # FAILED and SUCCEEDED come from the Job's (target) conditions only: its controller ends it.
        ended=state in (State.FAILED, State.SUCCEEDED),
        marked=names.ANNOTATION_END in annotations,
        queue=(job["metadata"].get("labels") or {}).get(names.LABEL_KUEUE_QUEUE, ""),
    )


def _condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def _job_state(job: dict[str, Any]) -> tuple[State, str]:
    for kind in ("Failed", "FailureTarget"):
        if found := _condition(job, kind):
            return State.FAILED, f"{found.get('reason', kind)}: {found.get('message', '')}".rstrip(": ")
    for kind in ("Complete", "SuccessCriteriaMet"):
        if _condition(job, kind):
            return State.SUCCEEDED, ""
    status = job.get("status") or {}
    if (job.get("spec") or {}).get("suspend"):
        queue = (job["metadata"].get("labels") or {}).get(names.LABEL_KUEUE_QUEUE)
        waiting = f"waiting for admission by Kueue's LocalQueue {queue!r}" if queue else "suspended"
        return State.PENDING, f"Job {job['metadata']['name']} is {waiting}"
    if int(status.get("ready") or 0) > 0:
        return State.RUNNING, ""
    return State.PENDING, ""


def _replica(role: RoleView, index: int, pod: dict[str, Any] | None) -> ReplicaView:
    hostname = names.pod_hostname(role.job, index)
    if pod is None:
        return ReplicaView(role.name, index, State.PENDING, "", hostname)
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    terminated = _terminated(status)
    exit_code = terminated.get("exitCode") if terminated else None
    finished = rfc3339(terminated.get("finishedAt")) if terminated else None
    message = str(terminated.get("message") or "") if terminated else ""
    name = pod["metadata"]["name"]
    reason = _stuck_reason(pod)
    if phase == "Succeeded":
        state = State.SUCCEEDED
    elif phase == "Failed":
        state = State.FAILED
        if not terminated:
            reason = f"{status.get('reason', 'Failed')}: {status.get('message', '')}".rstrip(": ")
    elif pod["metadata"].get("deletionTimestamp"):
        state = State.CANCELLED
    elif phase == "Running":
        state = State.RUNNING
    else:
        state = State.PENDING
    return ReplicaView(role.name, index, state, name, hostname, exit_code, finished, reason, message,
                       spare=state is State.RUNNING and _waits_as_spare(pod))


def _waits_as_spare(pod: dict[str, Any]) -> bool:
    """Whether the pod's container has our spare readiness probe (``pods.py``) and is not ready."""
    containers = (pod.get("spec") or {}).get("containers") or []
    probe = ((containers[0].get("readinessProbe") or {}).get("exec") or {}).get("command") or [] if containers else []
    if TRAINING_FLAG not in probe:
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and statuses[0].get("ready") is False


def _index_set(text: str) -> set[int]:
    """The indexes in a Job's ``failedIndexes`` (``"1,3-5"``)."""
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        if first.isdigit() and (last or first).isdigit():
            found.update(range(int(first), int(last or first) + 1))
    return found


def _terminated(status: dict[str, Any]) -> dict[str, Any]:
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return {}


def _stuck_reason(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}".rstrip(": ")
    if KUBELET_REJECTIONS.fullmatch(str(status.get("reason", ""))):
        return f"{status['reason']}: {status.get('message', '')}".rstrip(": ")
    return ""


def _failing(replicas: list[ReplicaView], end: JobEnd | None) -> ReplicaView | None:
    if end is not None and end.state is State.CANCELLED:
        return None
    if end is not None and end.replica:
        # Ended by us for this replica (an image that never pulled, a failure in another role):
        # its pod may be gone since, so it is the one whatever its state now.
        named = next((replica for replica in replicas if replica.key == end.replica), None)
        if named is not None:
            return dataclasses.replace(named, state=State.FAILED)
    failed = [replica for replica in replicas if replica.state is State.FAILED]
    return min(failed, key=lambda replica: (replica.finished_at or float("inf"), replica.key), default=None)


def _stopped_by_end(replica: ReplicaView, failing: ReplicaView | None, end: JobEnd | None) -> ReplicaView:
    # Pods stopped because the job was ending (a peer failed, a cancel, an end of ours) did not
    # fail themselves.
    if replica.state is State.SUCCEEDED:
        return replica
    if failing is not None and replica.key == failing.key:
        return failing
    if end is not None:
        return dataclasses.replace(replica, state=State.CANCELLED)
    if failing is not None and replica.state in (State.FAILED, State.CANCELLED):
        if replica.finished_at is None or failing.finished_at is None or replica.finished_at >= failing.finished_at:
            return dataclasses.replace(replica, state=State.CANCELLED)
    return replica


def _app_state(
    job_states: list[tuple[tuple[State, str], dict[str, Any]]],
    replicas: list[ReplicaView],
    end: JobEnd | None,
    failing: ReplicaView | None,
) -> tuple[State, str]:
    if end is not None:
        return end.state, end.message
    states = [state for (state, _), _ in job_states]
    if State.FAILED in states:
        job_message = next(message for (state, message), _ in job_states if state is State.FAILED)
        if failing is not None:
            return State.FAILED, failure_message(failing) + f" (Job: {job_message})"
        return State.FAILED, _given_up_on(job_states) + job_message
    if all(state is State.SUCCEEDED for state in states):
        return State.SUCCEEDED, ""
    stuck = [replica for replica in replicas if replica.reason and replica.state in (State.PENDING, State.FAILED)]
    detail = "; ".join(f"replica {replica.key} ({replica.pod or replica.hostname}): {replica.reason}"
                       for replica in stuck[:3])
    if len(stuck) > 3:
        detail += f"; and {len(stuck) - 3} more"
    waiting = "; ".join(message for (_, message), _ in job_states if message)
    message = "; ".join(text for text in (waiting, detail) if text)
    if State.RUNNING in states or any(replica.state is State.RUNNING for replica in replicas):
        return State.RUNNING, message
    return State.PENDING, message


def _given_up_on(job_states: list[tuple[tuple[State, str], dict[str, Any]]]) -> str:
    """The replicas a failed Job gave up on, where no pod of theirs is left to say (a deleted
    pod is gone from the API once it has ended)."""
    keys = [f"{_role(job, state).name}/{index}" for (state, _), job in job_states if state is State.FAILED
            for index in sorted(_index_set(str((job.get("status") or {}).get("failedIndexes") or "")))]
    return f"replica {', '.join(keys)} failed and its pod is gone: " if keys else ""


def failure_message(replica: ReplicaView) -> str:
    how = f"exited with code {replica.exit_code}" if replica.exit_code is not None else "failed"
    cause = replica.root_cause or replica.reason
    return f"replica {replica.key} (pod {replica.pod}) {how}" + (f": {cause}" if cause else "")

"""Reading a JobSet's and a Volcano Job's app state from the objects as the API returns them: the
objects are the ones our dry-run builds, with the status their controllers write."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.common.states import JobEnd, State
from torchx_ext.schedulers.kubernetes.scheduler import job_response
from torchx_ext.schedulers.kubernetes.jobset import read_jobset
from torchx_ext.schedulers.kubernetes.request import build_request
from torchx_ext.schedulers.kubernetes.options import ManifestOptions
from torchx_ext.schedulers.kubernetes.view import end_annotation, end_due
from torchx_ext.schedulers.kubernetes.volcano import PHASES, read_volcano

APP = "train-abc12345"
CREATED = "2026-11-22T10:00:00Z"


def built(backend: str, queue: str | None = None, j: str = "2x1") -> dict[str, Any]:
    app = ddp(script="train.py", j=j, image="img:1")
    obj = build_request(app, app_id=APP, options=ManifestOptions(backend=backend, queue=queue)).objects[0]
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid="u-1", creationTimestamp=CREATED)
    return obj


def condition(kind: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def pod(labels: dict[str, str], phase: str, exit_code: int | None = None, name: str = "p") -> dict[str, Any]:
    state = {"terminated": {"exitCode": exit_code, "finishedAt": "2026-11-22T10:05:00Z"}} if exit_code is not None else {}
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-22T10:00:01Z", "labels": labels},
            "status": {"phase": phase, "containerStatuses": [{"name": "train", "state": state}]}}


# -- Volcano --------------------------------------------------------------------------------------


def volcano(phase: str | None, retries: int = 0, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    job = built("volcano")
    job["metadata"]["annotations"].update(annotations or {})
    if phase is not None:
        job["status"] = {"state": {"phase": phase, "reason": "", "message": ""}, "retryCount": retries}
    return job


def volcano_pod(index: int, phase: str, exit_code: int | None = None) -> dict[str, Any]:
    return pod({"volcano.sh/job-name": APP, "volcano.sh/task-spec": "train", "volcano.sh/task-index": str(index)},
               phase, exit_code, name=f"{APP}-train-{index}")


@pytest.mark.parametrize(("phase", "expected"), [
    ("Pending", State.PENDING), ("Running", State.RUNNING), ("Restarting", State.RUNNING),
    ("Completing", State.RUNNING), ("Terminating", State.RUNNING), ("Aborting", State.CANCELLED),
    ("Aborted", State.CANCELLED), ("Completed", State.SUCCEEDED), ("Terminated", State.FAILED),
    ("Failed", State.FAILED),
])
def test_every_volcano_phase_has_a_state(phase: str, expected: State) -> None:
    pods = [volcano_pod(0, "Running"), volcano_pod(1, "Running")]
    assert read_volcano(APP, volcano(phase), pods).state is expected
    assert PHASES[phase] is expected


def test_a_volcano_phase_this_code_does_not_know_reads_as_the_pods_never_as_an_end() -> None:
    view = read_volcano(APP, volcano("Resizing"), [volcano_pod(0, "Running"), volcano_pod(1, "Running")])
    assert view.state is State.RUNNING and "Resizing" in view.message


def test_a_new_volcano_job_without_status_is_pending_and_replicas_come_from_task_and_index() -> None:
    view = read_volcano(APP, volcano(None), [volcano_pod(1, "Running")])
    assert view.state is State.PENDING
    states = {replica.key: replica.state for replica in view.replicas}
    assert states == {"train/0": State.PENDING, "train/1": State.RUNNING}
    assert [replica.hostname for replica in view.replicas] == [f"{APP}-train-0", f"{APP}-train-1"]


def test_a_failed_volcano_job_names_the_failed_replica_and_its_restarts() -> None:
    view = read_volcano(APP, volcano("Terminated", retries=2), [volcano_pod(0, "Succeeded", 0), volcano_pod(1, "Failed", 3)])
    assert view.state is State.FAILED and view.restarts == 2
    assert "replica train/1" in view.message and "exited with code 3" in view.message
    assert "Volcano Job train-abc12345 is Terminated" in view.message


def test_a_failed_volcano_job_names_the_replica_whose_pod_is_gone_first() -> None:
    # Volcano records no pod name for an evicted (deleted) pod: the replica without one was lost,
    # and its peer failed because of it.
    view = read_volcano(APP, volcano("Terminated"), [volcano_pod(0, "Failed", 1)])
    assert view.state is State.FAILED
    assert view.message.startswith("replica train/1 lost its pod; replica train/0 (pod train-abc12345-train-0) exited with code 1")


def test_our_end_on_a_volcano_job_is_its_state_whatever_the_phase() -> None:
    end = JobEnd(State.CANCELLED, 1.0, "cancelled by request")
    view = read_volcano(APP, volcano("Running", annotations={"torchx-ext/end": end_annotation(end)}),
                        [volcano_pod(0, "Running"), volcano_pod(1, "Failed", 143)])
    assert view.state is State.CANCELLED
    assert {replica.state for replica in view.replicas} == {State.CANCELLED}
    assert end_due(view, 2.0) == end  # not yet ended: the abort is applied again


# -- JobSet ---------------------------------------------------------------------------------------


def child(jobset: dict[str, Any], conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    replicated = jobset["spec"]["replicatedJobs"][0]
    template = replicated["template"]
    return {"metadata": {"name": f"{APP}-{replicated['name']}-0", "creationTimestamp": CREATED,
                         "labels": dict(template["metadata"]["labels"]),
                         "annotations": dict(template["metadata"]["annotations"])},
            "spec": template["spec"], "status": {"conditions": conditions or [], "ready": 2}}


def jobset_pod(index: int, phase: str, exit_code: int | None = None) -> dict[str, Any]:
    return pod({"batch.kubernetes.io/job-name": f"{APP}-train-0", "batch.kubernetes.io/job-completion-index": str(index)},
               phase, exit_code, name=f"{APP}-train-0-{index}-abcde")


def test_a_jobset_whose_job_failed_is_restarting_not_failed_while_restarts_are_left() -> None:
    jobset = built("jobset")
    jobset["spec"]["failurePolicy"]["maxRestarts"] = 2
    jobset["status"] = {"restarts": 1}
    failed_job = child(jobset, [condition("Failed", "PodFailurePolicy", "pod failed")])
    view = read_jobset(APP, jobset, [failed_job], [jobset_pod(0, "Running"), jobset_pod(1, "Failed", 5)])

    assert view.state is State.RUNNING and view.restarts == 1
    assert "restarting every pod (1 of 2 restarts so far)" in view.message and "replica train/1" in view.message
    assert end_due(view, 10.0) is None  # the JobSet controller ends or restarts its Jobs itself


def test_a_jobset_is_read_from_its_conditions_and_its_jobs_templates_while_they_are_recreated() -> None:
    jobset = built("jobset")
    jobset["status"] = {"restarts": 1, "conditions": [condition("Failed", "ReachedMaxRestarts", "jobset failed")]}
    view = read_jobset(APP, jobset, [], [])  # its Jobs deleted already
    assert view.state is State.FAILED and "JobSet: jobset failed" in view.message
    assert [replica.key for replica in view.replicas] == ["train/0", "train/1"]
    assert [replica.hostname for replica in view.replicas] == [f"{APP}-train-0-0", f"{APP}-train-0-1"]

    jobset["status"] = {"conditions": [condition("Completed", "AllJobsCompleted")]}
    assert read_jobset(APP, jobset, [], []).state is State.SUCCEEDED
    assert read_jobset(APP, None, [], []).state is None


def test_a_queued_jobset_waits_for_kueue() -> None:
    jobset = built("jobset", queue="team-a")
    view = read_jobset(APP, jobset, [], [])
    assert view.state is State.PENDING
    assert view.message == f"JobSet {APP} is waiting for admission by Kueue's LocalQueue 'team-a'"


def test_describe_of_an_elastic_role_says_how_many_replicas_run_now() -> None:
    jobset = built("jobset", j="1:2x1")
    view = read_jobset(APP, jobset, [child(jobset)], [jobset_pod(0, "Running")])
    assert view.state is State.RUNNING
    assert job_response(APP, view).msg == "role train runs 1 of 1..2 replicas"


def test_our_end_on_a_jobset_is_applied_again_to_a_job_it_did_not_stop() -> None:
    end = JobEnd(State.CANCELLED, 1.0, "cancelled by request")
    jobset = built("jobset", queue="team-a")
    jobset["spec"]["suspend"] = False  # admitted by Kueue
    jobset["metadata"]["annotations"]["torchx-ext/end"] = end_annotation(end)
    running = child(jobset)  # recreated by a restart after the cancel: no deadline
    view = read_jobset(APP, jobset, [running], [jobset_pod(0, "Running")])
    assert view.state is State.CANCELLED and end_due(view, 2.0) == end

    running["spec"] = {**running["spec"], "activeDeadlineSeconds": 1}
    assert end_due(read_jobset(APP, jobset, [running], [jobset_pod(0, "Running")]), 2.0) is None


def test_a_listed_jobset_read_without_its_jobs_runs_when_its_status_says_so() -> None:
    jobset = built("jobset")
    jobset["status"] = {"replicatedJobsStatus": [{"name": "train", "ready": 1, "active": 1}]}
    assert read_jobset(APP, jobset, [], []).state is State.RUNNING
    jobset["status"] = {"replicatedJobsStatus": [{"name": "train", "ready": 0, "active": 0}]}
    assert read_jobset(APP, jobset, [], []).state is State.PENDING


def test_a_queued_jobset_cancelled_by_suspending_it_only_is_stopped_again() -> None:
    # Kueue un-suspends a JobSet it admitted: only its Jobs' deadline stops a queued one.
    end = JobEnd(State.CANCELLED, 1.0, "cancelled by request")
    jobset = built("jobset", queue="team-a")
    jobset["metadata"]["annotations"]["torchx-ext/end"] = end_annotation(end)
    view = read_jobset(APP, jobset, [child(jobset)], [])
    assert [role.queue for role in view.roles] == ["team-a"]
    assert end_due(view, 2.0) == end

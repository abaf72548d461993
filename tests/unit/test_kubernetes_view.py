"""Reading an app's state from its Jobs and pods as the API returns them (JSON)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.common.states import JobEnd, State
from torchx_ext.schedulers.kubernetes.scheduler import job_response
from torchx_ext.schedulers.kubernetes.view import end_annotation, end_due, read_job

APP = "train-abc12345"
WAITING_MESSAGES = {"CreateContainerConfigError": 'secret "creds" not found'}


def job(conditions: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (), replicas: int = 2, ready: int = 0, suspend: bool = False,
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        role: str = "train") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{APP}-{role}", "creationTimestamp": "2026-11-22T10:00:00Z",
                     "labels": {"torchx-ext/app-id": APP, **(labels or {})},
                     "annotations": {"torchx-ext/role-name": role, "torchx-ext/image-pull-timeout": "60",
                                     **(annotations or {})}},
        "spec": {"completions": replicas, "parallelism": replicas, "suspend": suspend,
                 "template": {"spec": {"containers": [{"image": "img:1"}]}}},
        "status": {"ready": ready, "conditions": [{"type": kind, "status": "True", "reason": reason,
                                                    "message": f"{reason} happened"} for kind, reason in conditions]},
    }


def pod(index: int, phase: str, *, exit_code: int | None = None, finished: str = "2026-11-22T10:05:00Z",
        message: str = "", waiting: str | None = None, created: str = "2026-11-22T10:00:01Z",
        deleting: bool = False, status_reason: str | None = None, unschedulable: str | None = None,
        role: str = "train") -> dict[str, Any]:
    state: dict[str, Any] = {}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "finishedAt": finished, "message": message}}
    elif waiting:
        state = {"waiting": {"reason": waiting, "message": WAITING_MESSAGES.get(waiting, 'Back-off pulling image "img:1"')}}
    status: dict[str, Any] = {"phase": phase, "containerStatuses": [{"name": "train", "state": state}]}
    if status_reason:
        status.update(reason=status_reason, message={
            "TopologyAffinityError": "Resources cannot be allocated with Topology locality",
            "OutOfnvidia.com/gpu": "Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8, capacity: 8",
        }[status_reason])
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": unschedulable}]
    metadata: dict[str, Any] = {
        "name": f"{APP}-{role}-{index}-x{index}y", "creationTimestamp": created,
        "labels": {"batch.kubernetes.io/job-name": f"{APP}-{role}", "batch.kubernetes.io/job-completion-index": str(index)},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-22T10:05:01Z"
    return {"metadata": metadata, "status": status}


def test_no_job_is_an_unknown_app() -> None:
    assert read_job(APP, [], []).state is None


def test_running_and_succeeded_from_conditions_and_pods() -> None:
    running = read_job(APP, [job(ready=2)], [pod(0, "Running"), pod(1, "Running")])
    assert running.state is State.RUNNING
    assert [replica.state for replica in running.replicas] == [State.RUNNING, State.RUNNING]
    assert running.replicas[0].hostname == f"{APP}-train-0"

    done = read_job(APP, [job([("SuccessCriteriaMet", "CompletionsReached"), ("Complete", "CompletionsReached")])],
                    [pod(0, "Succeeded", exit_code=0), pod(1, "Succeeded", exit_code=0)])
    assert done.state is State.SUCCEEDED


def test_a_failed_job_names_the_first_failed_replica_its_code_and_the_launchers_report() -> None:
    report = json.dumps({"message": {"message": "rank 3 (local rank 1) exited with code 7",
                                     "extraInfo": {"timestamp": "1"}, "errorCode": 7}})
    view = read_job(APP, [job([("FailureTarget", "PodFailurePolicy")])], [
        pod(0, "Failed", exit_code=143, finished="2026-11-22T10:05:02Z", deleting=True),
        pod(1, "Failed", exit_code=1, finished="2026-11-22T10:05:00Z", message=report),
    ])

    assert view.state is State.FAILED
    assert "replica train/1" in view.message and "exited with code 1" in view.message
    assert "rank 3 (local rank 1) exited with code 7" in view.message
    assert [replica.state for replica in view.replicas] == [State.CANCELLED, State.FAILED]


def test_a_cancelled_app_is_cancelled_whatever_its_pods_exited_with() -> None:
    end = end_annotation(JobEnd(State.CANCELLED, 1.0, "cancelled by request"))
    view = read_job(APP, [job([("Suspended", "JobSuspended")], suspend=True, annotations={"torchx-ext/end": end})],
                    [pod(0, "Failed", exit_code=143), pod(1, "Succeeded", exit_code=0)])
    assert view.state is State.CANCELLED
    assert [replica.state for replica in view.replicas] == [State.CANCELLED, State.SUCCEEDED]


def test_a_queued_job_is_pending_and_says_it_waits_for_kueue() -> None:
    view = read_job(APP, [job(suspend=True, labels={"kueue.x-k8s.io/queue-name": "team"})], [])
    assert view.state is State.PENDING and "Kueue's LocalQueue 'team'" in view.message


def test_a_stuck_job_says_why() -> None:
    pulling = read_job(APP, [job()], [pod(0, "Pending", waiting="ImagePullBackOff"), pod(1, "Pending")])
    assert pulling.state is State.PENDING
    assert "replica train/0" in pulling.message and "ImagePullBackOff" in pulling.message
    assert pulling.pull_stuck_since is not None and pulling.pull_timeout_s == 60

    unschedulable = read_job(APP, [job()], [pod(0, "Pending", unschedulable="0/3 nodes are available: 3 Insufficient cpu.")])
    assert "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu." in unschedulable.message

    rejected = read_job(APP, [job(ready=1)], [pod(0, "Failed", status_reason="TopologyAffinityError"), pod(1, "Running")])
    assert "TopologyAffinityError: Resources cannot be allocated with Topology locality" in rejected.message


def test_a_replaced_pod_counts_as_a_restart_and_the_newest_pod_is_the_replica() -> None:
    view = read_job(APP, [job(ready=2)], [
        pod(0, "Failed", exit_code=1, created="2026-11-22T10:00:01Z"),
        pod(0, "Running", created="2026-11-22T10:01:00Z"),
        pod(1, "Running"),
    ])
    assert view.state is State.RUNNING and view.restarts == 1
    assert view.replicas[0].state is State.RUNNING


def test_a_stuck_job_names_a_missing_secret_and_a_kubelet_out_of_devices() -> None:
    config = read_job(APP, [job()], [pod(0, "Pending", waiting="CreateContainerConfigError"), pod(1, "Pending")])
    assert config.state is State.PENDING
    assert 'replica train/0' in config.message and 'CreateContainerConfigError: secret "creds" not found' in config.message
    assert end_due(config, now=1e10) is None  # not an image: no timeout ends it

    out = read_job(APP, [job(ready=1)], [pod(0, "Failed", status_reason="OutOfnvidia.com/gpu"), pod(1, "Running")])
    assert "replica train/0" in out.message and "OutOfnvidia.com/gpu: Node didn't have enough resource" in out.message


def test_an_image_that_never_pulls_ends_the_app_after_its_timeout_even_a_zero_one() -> None:
    created = "2026-11-22T10:00:01Z"
    stuck_at = 1795341601.0  # created, as a POSIX time
    jobs = [job(annotations={"torchx-ext/image-pull-timeout": "0"})]
    view = read_job(APP, jobs, [pod(0, "Pending", waiting="ErrImagePull", created=created), pod(1, "Running")])
    assert view.pull_stuck_since == stuck_at

    assert end_due(view, now=stuck_at) is None
    end = end_due(view, now=stuck_at + 0.5)
    assert end is not None and end.state is State.FAILED and end.replica == "train/0"
    assert "did not pull within 0 s" in end.message

    # Once ended (the annotation on the suspended Job, its pods deleted): the stuck replica is the
    # failed one, the other was stopped.
    ended = read_job(APP, [job(suspend=True, annotations={"torchx-ext/end": end_annotation(end)})], [])
    assert ended.state is State.FAILED and "did not pull within 0 s" in ended.message
    assert [replica.state for replica in ended.replicas] == [State.FAILED, State.CANCELLED]
    assert ended.failing is not None and ended.failing.key == "train/0"
    assert end_due(ended, now=stuck_at + 100) is None


def test_a_failed_role_ends_the_roles_still_running_and_keeps_its_failing_replica() -> None:
    jobs = [job([("Failed", "PodFailurePolicy")], role="trainer"), job(ready=2, role="reader")]
    pods = [pod(0, "Failed", exit_code=3, role="trainer"), pod(1, "Failed", exit_code=143, deleting=True, role="trainer",
                                                                  finished="2026-11-22T10:05:03Z"),
            pod(0, "Running", role="reader"), pod(1, "Running", role="reader")]
    view = read_job(APP, jobs, pods)
    assert view.state is State.FAILED and "replica trainer/0" in view.message
    assert [role.ended for role in view.roles] == [True, False]

    end = end_due(view, now=2e9)
    assert end is not None and end.state is State.FAILED and end.replica == "trainer/0"
    assert "exited with code 3" in end.message

    # The reader's pods stopped by that end exit 143; the app stays FAILED for trainer/0's reason.
    ended_jobs = [job([("Failed", "PodFailurePolicy")], role="trainer", annotations={"torchx-ext/end": end_annotation(end)}),
                  job(suspend=True, role="reader", annotations={"torchx-ext/end": end_annotation(end)})]
    stopped = [pod(index, "Failed", exit_code=143, role="reader", finished="2026-11-22T10:05:09Z") for index in (0, 1)]
    ended = read_job(APP, ended_jobs, pods[:2] + stopped)
    assert ended.state is State.FAILED and ended.message == end.message
    assert {replica.key: replica.state for replica in ended.replicas} == {
        "trainer/0": State.FAILED, "trainer/1": State.CANCELLED, "reader/0": State.CANCELLED, "reader/1": State.CANCELLED}
    assert ended.failing is not None and ended.failing.exit_code == 3
    assert end_due(ended, now=2e9) is None


@pytest.mark.parametrize("condition", ["FailureTarget", "Failed"])
def test_a_failed_single_role_app_needs_no_end_from_us(condition: str) -> None:
    # FailureTarget: the Job controller is stopping the other pods already.
    pods = [pod(0, "Failed", exit_code=1), pod(1, "Running" if condition == "FailureTarget" else "Succeeded")]
    view = read_job(APP, [job([(condition, "BackoffLimitExceeded")])], pods)
    assert view.state is State.FAILED and end_due(view, now=2e9) is None


def test_an_end_that_reached_only_some_jobs_is_due_again_and_the_earliest_end_wins() -> None:
    cancel = JobEnd(State.CANCELLED, 100.0, "cancelled by request")
    later = JobEnd(State.FAILED, 200.0, "replica b/0 failed", replica="b/0")
    jobs = [job(ready=2, role="a", annotations={"torchx-ext/end": end_annotation(later)}, suspend=True),
            job(ready=2, role="b"), job(ready=2, role="c", annotations={"torchx-ext/end": end_annotation(cancel)})]
    view = read_job(APP, jobs, [pod(0, "Running", role="b"), pod(1, "Running", role="b")])

    assert view.state is State.CANCELLED and view.end == cancel
    assert end_due(view, now=300.0) == cancel  # role b was never stopped

    jobs[1] = job(role="b", annotations={"torchx-ext/end": end_annotation(cancel)}, suspend=True)
    assert end_due(read_job(APP, jobs, []), now=300.0) is None


def test_a_replaced_pod_still_counts_once_a_succeeded_job_has_deleted_its_replacement() -> None:
    # -j 1:2: index 0 decides success; the Job then deletes index 1's running replacement pod.
    elastic = {"torchx-ext/min-replicas": "1"}
    succeeded = [("SuccessCriteriaMet", "SuccessPolicy"), ("Complete", "SuccessPolicy")]
    replaced = read_job(APP, [job(succeeded, annotations=elastic)],
                        [pod(0, "Succeeded", exit_code=0), pod(1, "Failed", exit_code=1)])
    assert replaced.state is State.SUCCEEDED and replaced.restarts == 1
    # ... and while it is being deleted (stopped, its exit no failure).
    deleting = read_job(APP, [job(succeeded, annotations=elastic)], [
        pod(0, "Succeeded", exit_code=0), pod(1, "Failed", exit_code=1),
        pod(1, "Failed", exit_code=143, created="2026-11-22T10:01:00Z", deleting=True)])
    assert deleting.restarts == 1

    # An index the Job gave up on (its failures tolerated: maxFailedIndexes) was not replaced.
    given_up = job(succeeded, annotations=elastic)
    given_up["status"]["failedIndexes"] = "1"
    view = read_job(APP, [given_up], [pod(0, "Succeeded", exit_code=0), pod(1, "Failed", exit_code=1)])
    assert view.state is State.SUCCEEDED and view.restarts == 0

    # A failure that failed the Job, or one whose replacement is not there yet, is no restart.
    failed = read_job(APP, [job([("Failed", "PodFailurePolicy")])], [pod(0, "Failed", exit_code=1), pod(1, "Succeeded", exit_code=0)])
    waiting = read_job(APP, [job(ready=1)], [pod(0, "Failed", exit_code=1), pod(1, "Running")])
    assert (failed.state, failed.restarts, waiting.state, waiting.restarts) == (State.FAILED, 0, State.RUNNING, 0)


def test_replicas_that_stop_together_and_fail_the_job_restarted_nothing() -> None:
    # Every node's launcher stops restarting at once (exit 3, stuck at one point): the Job counts
    # both failures, and neither pod was replaced.
    stopped = job([("FailureTarget", "PodFailurePolicy"), ("Failed", "PodFailurePolicy")])
    stopped["status"]["failed"] = 2
    view = read_job(APP, [stopped], [pod(0, "Failed", exit_code=3), pod(1, "Failed", exit_code=3)])
    assert (view.state, view.restarts) == (State.FAILED, 0)

    # One of them replaced before, and its replacement failed with the other: one restart.
    stopped["status"]["failed"] = 3
    view = read_job(APP, [stopped], [pod(0, "Failed", exit_code=1, created="2026-11-22T10:00:01Z"),
                                     pod(0, "Failed", exit_code=3, created="2026-11-22T10:01:00Z"),
                                     pod(1, "Failed", exit_code=3)])
    assert view.restarts == 1

    # A replaced pod gone from the API still counts; a failed pod whose replacement is to come does not yet.
    running = job(ready=1)
    running["status"]["failed"] = 2
    view = read_job(APP, [running], [pod(0, "Running", created="2026-11-22T10:01:00Z"), pod(1, "Failed", exit_code=1)])
    assert (view.state, view.restarts) == (State.RUNNING, 1)


def test_a_running_pod_that_our_spare_probe_calls_not_ready_is_a_hot_spare() -> None:
    spare, training = pod(1, "Running"), pod(0, "Running")
    for each, ready in ((spare, False), (training, True)):
        each["spec"] = {"containers": [{"readinessProbe": {"exec": {"command": ["python", "-m", "x", "--training", "f"]}}}]}
        each["status"]["containerStatuses"][0]["ready"] = ready
    unprobed = pod(2, "Running")
    unprobed["status"]["containerStatuses"][0]["ready"] = False

    view = read_job(APP, [job([], replicas=3)], [training, spare, unprobed])

    assert view.spares == [("train", 1)]


# The role's policy as its Job carries it, and a Job submitted before that carried its minimum alone.
@pytest.mark.parametrize("annotations", [{"torchx-ext/policy": RolePolicy(num_replicas=3, min_replicas=1).to_text()},
                                         {"torchx-ext/min-replicas": "1"}], ids=["policy", "before-the-policy"])
def test_an_elastic_role_says_how_many_of_its_min_to_max_replicas_run(annotations: dict[str, str]) -> None:
    view = read_job(APP, [job(replicas=3, ready=2, annotations=annotations)],
                    [pod(0, "Running"), pod(1, "Running"), pod(2, "Failed", exit_code=1)])
    assert job_response(APP, view).msg == "role train runs 2 of 1..3 replicas", view
    fixed = read_job(APP, [job(replicas=3, ready=3)], [pod(0, "Running"), pod(1, "Running"), pod(2, "Running")])
    assert job_response(APP, fixed).msg == ""

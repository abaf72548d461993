"""What each kubernetes backend adds, against the fake API server whose JobSet, Volcano and Kueue
stand-ins act on the objects' own fields (the conformance suite runs every backend too): gang
restarts, the gang's minAvailable, Kueue's admission and its reasons, and the elastic proof."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import Runner
from torchx.schedulers import get_scheduler_factories
from torchx.specs import AppDef, AppState, RetryPolicy

from tests.conformance.jobs_api import status_until, wait, wait_for_line
from tests.fixtures.docker_engine import TestImage
from tests.kubernetes.apiserver import TestCluster
from tests.kubernetes.apiserver.resources import JOBSETS, PODS, SERVICES, VOLCANO_JOBS
from torchx_ext.components.dist import ddp

JOBS = Path(__file__).parent / "jobs"
CONFORMANCE_JOBS = Path(__file__).parents[1] / "conformance" / "jobs"


def _python_app(code: str, image: str, replicas: int = 2, max_retries: int = 0, mounts: list[str] | None = None,
                policy: RetryPolicy = RetryPolicy.REPLICA) -> AppDef:
    app = ddp(script=str(CONFORMANCE_JOBS / "echo.py"), j=f"{replicas}x1", cpu=1, image=image,
              max_retries=max_retries, mounts=mounts)
    role = app.roles[0]
    role.entrypoint, role.args, role.retry_policy = sys.executable, ["-c", code], policy
    return app


@pytest.mark.parametrize("policy, jobset_restarts, replica_0_starts", [
    (RetryPolicy.APPLICATION, 1, 2),  # torchx's default: every pod restarts
    (RetryPolicy.REPLICA, 0, 1),  # the failed pod alone is replaced, within its Job
])
def test_a_jobset_restarts_what_the_retry_policy_says_when_a_pod_fails_and_counts_it(
    runner: Runner, kube_namespace: str, test_image: TestImage, kube_cluster: TestCluster, tmp_path: Path,
    policy: RetryPolicy, jobset_restarts: int, replica_0_starts: int
) -> None:
    # Replica 1 fails the first time; replica 0 runs on unless the whole gang restarts.
    code = ("import os, sys, time, pathlib; index = int(os.environ['JOB_COMPLETION_INDEX']); "
            "marker = pathlib.Path('/state/failed-once'); "
            "open(f'/state/starts-{index}', 'a').write('start\\n'); "
            "(marker.write_text('x'), sys.exit(4)) if index == 1 and not marker.exists() else time.sleep(4)")
    app = _python_app(code, test_image.name, max_retries=1, mounts=["type=bind", f"src={tmp_path}", "dst=/state"],
                      policy=policy)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": "jobset", "cancel_grace": 2})

    assert wait(runner, handle, timeout_s=120) == AppState.SUCCEEDED
    status = runner.status(handle)
    assert status is not None and status.num_restarts == 1
    jobset = kube_cluster.store.list(JOBSETS, kube_namespace)[0][0]
    assert jobset["status"].get("restarts", 0) == jobset_restarts
    assert any(c["type"] == "Completed" and c["status"] == "True" for c in jobset["status"]["conditions"])
    assert (tmp_path / "starts-0").read_text().count("start") == replica_0_starts
    assert (tmp_path / "starts-1").read_text().count("start") == 2


def test_a_jobset_out_of_restarts_fails_naming_the_replica(
    runner: Runner, kube_namespace: str, test_image: TestImage
) -> None:
    code = "import os, sys, time; sys.exit(9) if os.environ['JOB_COMPLETION_INDEX'] == '1' else time.sleep(30)"
    handle = runner.run(_python_app(code, test_image.name), "kubernetes",
                        cfg={"namespace": kube_namespace, "backend": "jobset", "cancel_grace": 2})

    assert wait(runner, handle, timeout_s=60) == AppState.FAILED
    status = runner.status(handle)
    assert status is not None
    assert "replica echo/1" in status.msg and "exited with code 9" in status.msg and "JobSet:" in status.msg


def test_volcano_starts_no_pod_of_the_gang_until_min_available_can_run(
    runner: Runner, kube_namespace: str, test_image: TestImage, kube_cluster: TestCluster
) -> None:
    kube_cluster.hold_pods("volcano.sh/task-index=1")
    app = ddp(script=str(CONFORMANCE_JOBS / "echo.py"), j="2x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": "volcano"})

    time.sleep(3)
    pods = kube_cluster.store.list(PODS, kube_namespace)[0]
    assert len(pods) == 2 and not any(pod["spec"].get("nodeName") for pod in pods), "a pod ran without its gang"
    status = runner.status(handle)
    assert status is not None and status.state == AppState.PENDING

    kube_cluster.release_pods()
    assert wait(runner, handle, timeout_s=60) == AppState.SUCCEEDED
    job = kube_cluster.store.list(VOLCANO_JOBS, kube_namespace)[0][0]
    assert job["status"]["state"]["phase"] == "Completed"


@pytest.mark.parametrize("backend", ["job", "jobset"])
def test_a_queued_app_says_why_kueue_does_not_admit_it_and_runs_once_the_quota_allows(
    runner: Runner, kube_namespace: str, test_image: TestImage, kube_cluster: TestCluster, backend: str
) -> None:
    app = ddp(script=str(CONFORMANCE_JOBS / "echo.py"), j="2x1", cpu=1, image=test_image.name)
    kube_cluster.add_local_queue(kube_namespace, "team-a", cpus=1.5)  # the app asks for 2 CPUs (less the kubelet's share)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": backend, "queue": "team-a"})

    status = status_until(runner, handle, lambda status: "insufficient unused quota" in status.msg)
    assert status.state == AppState.PENDING
    assert "waiting for admission by Kueue's LocalQueue 'team-a'" in status.msg
    assert "Kueue says Pending: couldn't assign flavors" in status.msg

    kube_cluster.kueue_queues["team-a"] = 4
    assert wait(runner, handle, timeout_s=60) == AppState.SUCCEEDED


def test_an_elastic_job_runs_with_min_nodes_grows_to_max_and_survives_a_pod_failing_mid_run(
    runner: Runner, kube_namespace: str, test_image: TestImage, kube_cluster: TestCluster, tmp_path: Path
) -> None:
    # -j 1:2x1: replica 1's pod is held off the node at first, so the job starts with one node.
    kube_cluster.hold_pods("batch.kubernetes.io/job-completion-index=1")
    app = ddp(str(Path("/state")), script=str(JOBS / "elastic.py"), j="1:2x1", cpu=1, image=test_image.name,
              max_retries=1, rdzv_conf="last_call_timeout=2", mounts=["type=bind", f"src={tmp_path}", "dst=/state"])
    # max_retries=1 on 1..2 nodes gives each launcher --max-restarts 3: it restarts its workers
    # when a peer's fail; a node joining re-rendezvouses without counting.
    assert app.roles[0].args[app.roles[0].args.index("--max-restarts") + 1] == "3"
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "cancel_grace": 2})

    wait_for_line(runner, handle, "elastic", 0, r"replica 0 step 2 world 1 sum 1", timeout_s=90)
    status = runner.status(handle)
    assert status is not None and status.state == AppState.RUNNING
    assert "role elastic runs 1 of 1..2 replicas" in status.msg, status.msg

    kube_cluster.release_pods()
    status_until(runner, handle, lambda status: "runs 2 of 1..2 replicas" in status.msg, timeout_s=90)
    assert wait(runner, handle, timeout_s=180) == AppState.SUCCEEDED

    lines = runner.log_lines(handle, "elastic", 0)
    worlds = [line for line in lines if "replica 0 step" in line]
    assert any("world 1 sum 1" in line for line in worlds) and any("world 2 sum 2" in line for line in worlds)
    # Its last all-reduces had both nodes (replica 1's pod may be gone since: index 0 decides).
    assert any("replica 0 finished world 2" in line for line in runner.log_lines(handle, "elastic", 0))
    assert (tmp_path / "replica-1-failed").exists()  # the first pod of replica 1 did fail mid-run
    status = runner.status(handle)
    assert status is not None and status.num_restarts == 1  # replica 1's pod was replaced


@pytest.mark.parametrize(("backend", "group", "install"), [
    ("jobset", "jobset.x-k8s.io", "install JobSet"), ("volcano", "batch.volcano.sh", "install Volcano")])
def test_a_backend_whose_crd_the_cluster_lacks_is_one_error_naming_what_to_install(
    runner: Runner, kube_namespace: str, test_image: TestImage, kube_cluster: TestCluster, backend: str, group: str,
    install: str
) -> None:
    from torchx_ext.errors import KubernetesError

    kube_cluster.missing_apis.add(group)
    app = ddp(script=str(CONFORMANCE_JOBS / "echo.py"), j="1x1", cpu=1, image=test_image.name)

    with pytest.raises(KubernetesError, match=rf"the cluster has no .* API \(.*{group}.*\): {install} .* or use "
                                              r"-cfg backend=job"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": backend})
    # The other backends' apps are still listed.
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace})
    scheduler = get_scheduler_factories()["kubernetes"]("test")
    listed = [item.app_id for item in scheduler.list(cfg={"namespace": kube_namespace})]
    scheduler.close()
    assert listed == [handle.rpartition("/")[2]]


@pytest.mark.parametrize("validate_spec", [True, False])
def test_validate_spec_puts_every_object_through_the_servers_dry_run_so_a_refused_app_creates_nothing(
    runner: Runner, kube_namespace: str, test_image: TestImage, kube_cluster: TestCluster, validate_spec: bool
) -> None:
    from torchx_ext.errors import KubernetesError

    kube_cluster.fail_next(422, path_contains="/jobs")  # the Service is accepted, the Job after it is not
    app = ddp(script=str(CONFORMANCE_JOBS / "echo.py"), j="1x1", cpu=1, image=test_image.name)
    deleted_before = kube_cluster.requests("DELETE", f"/namespaces/{kube_namespace}/services/")

    with pytest.raises(KubernetesError, match=r"\(422\)"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "validate_spec": validate_spec})
    # Without the dry run the Service was created, then deleted again when the Job was refused.
    deleted = kube_cluster.requests("DELETE", f"/namespaces/{kube_namespace}/services/") - deleted_before
    assert deleted == (0 if validate_spec else 1)
    assert not kube_cluster.store.list(SERVICES, kube_namespace)[0]


@pytest.mark.parametrize("admitted_before_cancel", [True, False])
@pytest.mark.parametrize("backend", ["job", "jobset"])
def test_a_cancelled_queued_app_stays_stopped_whenever_kueue_admits_it(
    runner: Runner, kube_namespace: str, test_image: TestImage, kube_cluster: TestCluster, docker_client: Any,
    backend: str, admitted_before_cancel: bool
) -> None:
    from tests.conformance.conftest import kube_leftovers

    kube_cluster.add_local_queue(kube_namespace, "team-a", cpus=2 if admitted_before_cancel else 0)
    app = ddp(script=str(CONFORMANCE_JOBS / "sleeper.py"), j="1x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": backend, "queue": "team-a",
                                                "cancel_grace": 2})
    if admitted_before_cancel:
        wait_for_line(runner, handle, "sleeper", 0, r"running rank 0")

    runner.cancel(handle)
    kube_cluster.kueue_queues["team-a"] = 2  # admitted now, if it was not: its pods start, then stop
    time.sleep(6)

    status = runner.status(handle)
    assert status is not None and status.state == AppState.CANCELLED
    deadline = time.monotonic() + 20
    while [p for p in kube_cluster.store.list(PODS, kube_namespace)[0] if p["status"].get("phase") == "Running"] \
            and time.monotonic() < deadline:
        time.sleep(0.3)
    assert kube_leftovers(docker_client)(handle.rpartition("/")[2]) == []
    if backend == "jobset":
        jobset = kube_cluster.store.list(JOBSETS, kube_namespace)[0][0]
        failed = [c for c in jobset["status"]["conditions"] if c["type"] == "Failed" and c["status"] == "True"]
        assert [c["reason"] for c in failed] == ["FailurePolicy_cancelledByTorchx"], jobset["status"]
        assert jobset["status"].get("restarts", 0) == 0  # failed by the rule, not restarted
    status = runner.status(handle)
    assert status is not None and status.state == AppState.CANCELLED

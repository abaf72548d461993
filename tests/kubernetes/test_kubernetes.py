"""The kubernetes scheduler through torchx's Runner against the fake API server (the real
client over HTTP), whose kubelet runs the pods on the test Docker engine. The conformance
suite covers the common behaviour; these are what only Kubernetes has."""

from __future__ import annotations

import json
import sys
from decimal import Decimal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kube
from kubernetes import config as kube_config
from torchx.runner import Runner
from torchx.schedulers import get_scheduler_factories
from torchx.specs import AppDef, AppState, Resource, Role

from tests.conformance.conftest import kube_leftovers
from tests.conformance.jobs_api import status_until, wait, wait_for_line
from tests.fixtures.docker_engine import TestImage
from tests.kubernetes.apiserver import TestCluster
from torchx_ext.components.dist import ddp
from torchx_ext.errors import KubernetesError

JOBS = Path(__file__).parents[1] / "conformance" / "jobs"
AFFINITY = Path(__file__).parents[1] / "docker" / "jobs" / "affinity.py"


@pytest.fixture
def api(kube_cluster: TestCluster) -> Iterator[Any]:
    api_client = kube_config.new_client_from_config()
    yield api_client
    api_client.close()


def ours(app_handle: str) -> tuple[str, str]:
    namespace, _, name = app_handle.rpartition("/")[2].rpartition(":")
    return namespace, name


def objects(api: Any, namespace: str) -> dict[str, list[str]]:
    """Our objects left in ``namespace``: Jobs, Services and pods (not yet deleted)."""
    selector = "torchx-ext/app-id"
    return {
        "jobs": [job.metadata.name for job in kube.BatchV1Api(api).list_namespaced_job(
            namespace, label_selector=selector).items],
        "services": [svc.metadata.name for svc in kube.CoreV1Api(api).list_namespaced_service(
            namespace, label_selector=selector).items],
        "pods": [pod.metadata.name for pod in kube.CoreV1Api(api).list_namespaced_pod(
            namespace, label_selector=selector).items if not pod.metadata.deletion_timestamp],
    }


def pods_of(cluster: TestCluster, namespace: str) -> list[dict[str, Any]]:
    from tests.kubernetes.apiserver.resources import PODS

    found: list[dict[str, Any]] = cluster.store.list(PODS, namespace)[0]
    return found


def test_ranks_find_rank_0_by_its_dns_name_and_numa_aligned_pods_get_exclusive_cpus(
    runner: Runner, kube_namespace: str, test_image: TestImage, docker_client: Any
) -> None:
    app = ddp(script=str(AFFINITY), j="2x1", cpu=1, memMB=512, image=test_image.name)
    # reserved_memmb=0: 512 MiB per pod, none of it left out for the test node's kubelet.
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "numa_aligned": True, "reserved_memmb": 0})

    assert wait(runner, handle) == AppState.SUCCEEDED
    status = runner.status(handle)
    assert status is not None
    hostnames = [replica.hostname for role in status.roles for replica in role.replicas]
    namespace, name = ours(handle)
    assert hostnames == [f"{name}-affinity-0.{name}", f"{name}-affinity-1.{name}"]
    seen = []
    for replica in (0, 1):
        lines = [line for line in runner.log_lines(handle, "affinity", replica) if "AFFINITY " in line]
        seen.append(json.loads(lines[0].split("AFFINITY ", 1)[1])["cpus"])
    # Guaranteed pods with one integer CPU each: the static CPU manager gives each its own, the
    # container is pinned to it, and that is all its worker may use.
    containers = docker_client.containers.list(all=True, filters={"label": "torchx-ext-test.kube/pod"})
    pinned = sorted(container.attrs["HostConfig"]["CpusetCpus"] for container in containers
                    if container.labels["torchx-ext-test.kube/pod"].startswith(f"{namespace}/{name}-"))
    assert sorted(",".join(map(str, cpus)) for cpus in seen) == pinned
    assert all(len(cpus) == 1 for cpus in seen) and seen[0] != seen[1]


def test_a_missing_namespace_a_forbidden_one_and_a_failing_server_are_one_line_each_leaving_nothing(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage, api: Any
) -> None:
    app = ddp(script="train.py", j="1x1", image=test_image.name)

    with pytest.raises(KubernetesError, match=r"namespace 'no-such-ns' does not exist: create it .*-cfg namespace"):
        runner.run(app, "kubernetes", cfg={"namespace": "no-such-ns"})

    kube_cluster.forbidden_namespaces.add(kube_namespace)
    with pytest.raises(KubernetesError, match=r"\(403\): forbidden: .*ask the cluster's admin for access"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace})
    kube_cluster.forbidden_namespaces.clear()

    kube_cluster.fail_next(500)
    with pytest.raises(KubernetesError, match=r"\(500\): the API server failed: .*try again"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace})

    with pytest.raises(KubernetesError, match=r"\(422\): the API server refused it as invalid: .*serviceAccountName"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "service_account": "Not_A_Name"})

    assert objects(api, kube_namespace) == {"jobs": [], "services": [], "pods": []}


def test_a_name_conflict_is_409_and_rolls_back_only_what_this_submit_created(
    kube_namespace: str, test_image: TestImage, api: Any
) -> None:
    scheduler = get_scheduler_factories()["kubernetes"]("test")
    app = ddp(script="train.py", j="1x1", image=test_image.name)
    info = scheduler.submit_dryrun(app, cfg={"namespace": kube_namespace})
    job = info.request.objects[1]  # after the Service
    # Someone else's Job with the name ours would take: the Service is created, the Job refused.
    kube.BatchV1Api(api).create_namespaced_job(kube_namespace, {**job, "spec": {**job["spec"], "suspend": True}})

    with pytest.raises(KubernetesError, match=r"\(409\): already exists: .*torchx delete"):
        scheduler.schedule(info)

    assert objects(api, kube_namespace) == {"jobs": [job["metadata"]["name"]], "services": [], "pods": []}
    scheduler.close()


def test_describe_of_a_1000_replica_job_makes_two_requests(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage
) -> None:
    kube_cluster.hold_pods("torchx-ext/app-id")  # 1000 pod objects, none of them run
    app = ddp(script="train.py", j="1000x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace})
    scheduler = get_scheduler_factories()["kubernetes"]("test")
    namespace, name = ours(handle)
    deadline = time.monotonic() + 60
    while len(pods_of(kube_cluster, namespace)) < 1000 and time.monotonic() < deadline:
        time.sleep(0.5)

    before = kube_cluster.requests()
    description = scheduler.describe(f"{namespace}:{name}")

    assert kube_cluster.requests() - before == 2
    assert description is not None and description.state == AppState.PENDING
    assert sum(len(role.replicas) for role in description.roles_statuses) == 1000
    scheduler.delete(f"{namespace}:{name}")
    scheduler.close()


def test_an_image_that_does_not_pull_is_named_then_fails_the_job_after_the_timeout(
    runner: Runner, kube_namespace: str, api: Any
) -> None:
    app = ddp(script="train.py", j="1x1", cpu=1, image="registry.example/no-such-image:1")
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "image_pull_timeout": 4})

    stuck = status_until(runner, handle, lambda status: "ImagePull" in status.msg)
    assert stuck.state == AppState.PENDING and "replica train/0" in stuck.msg
    failed = status_until(runner, handle, lambda status: status.is_terminal(), timeout_s=30)
    assert failed.state == AppState.FAILED
    assert "did not pull within 4 s" in failed.msg and "image_pull_secrets" in failed.msg
    deadline = time.monotonic() + 15
    while objects(api, kube_namespace)["pods"] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert objects(api, kube_namespace)["pods"] == []


def test_a_pod_no_node_takes_says_so(runner: Runner, kube_namespace: str, test_image: TestImage) -> None:
    app = ddp(script="train.py", j="1x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "node_selector": {"pool": "gpu"}})

    stuck = status_until(runner, handle, lambda status: "Unschedulable" in status.msg)

    assert stuck.state == AppState.PENDING
    assert "didn't match Pod's node affinity/selector" in stuck.msg
    runner.cancel(handle)
    assert wait(runner, handle, timeout_s=30) == AppState.CANCELLED


def test_gpus_asked_as_a_mig_profile_run_where_the_node_offers_it_and_wait_where_it_does_not(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage
) -> None:
    mig = "nvidia.com/mig-1g.10gb"
    kube_cluster.allocatable[mig] = Decimal(2)  # as a device plugin advertises two MIG slices
    try:
        cfg = {"namespace": kube_namespace, "gpu_resource": mig}
        fits = runner.run(ddp(script=str(JOBS / "echo.py"), j="1x2", cpu=1, gpu=2, image=test_image.name), "kubernetes",
                          cfg=cfg)
        assert wait(runner, fits, timeout_s=90) == AppState.SUCCEEDED
        too_many = runner.run(ddp(script=str(JOBS / "echo.py"), j="1x4", cpu=1, gpu=4, image=test_image.name),
                              "kubernetes", cfg=cfg)
        stuck = status_until(runner, too_many, lambda status: "Insufficient" in status.msg)
        assert stuck.state == AppState.PENDING and f"1 Insufficient {mig}" in stuck.msg, stuck.msg
        runner.cancel(too_many)
        assert wait(runner, too_many, timeout_s=30) == AppState.CANCELLED
    finally:
        del kube_cluster.allocatable[mig]


def test_a_topology_rejection_fails_the_job_and_says_why(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage
) -> None:
    numa_nodes, policy = kube_cluster.numa_nodes, kube_cluster.topology_policy
    kube_cluster.numa_nodes, kube_cluster.topology_policy = [[0], [1]], "single-numa-node"
    try:
        app = ddp(script="train.py", j="1x1", cpu=3, memMB=512, image=test_image.name)  # 2 whole CPUs
        handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "numa_aligned": True,
                                                    "reserved_memmb": 0})

        assert wait(runner, handle, timeout_s=60) == AppState.FAILED
    finally:
        kube_cluster.numa_nodes, kube_cluster.topology_policy = numa_nodes, policy
    status = runner.status(handle)
    assert status is not None
    assert "TopologyAffinityError" in status.msg and "replica train/0" in status.msg


def test_a_queued_job_waits_for_kueue_and_runs_once_admitted(
    runner: Runner, kube_namespace: str, test_image: TestImage, api: Any, kube_cluster: TestCluster
) -> None:
    kube_cluster.add_local_queue(kube_namespace, "team-a")  # with no quota: Kueue admits nothing itself
    app = ddp(script=str(JOBS / "echo.py"), j="1x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "queue": "team-a"})
    status = runner.status(handle)
    assert status is not None and status.state == AppState.PENDING
    assert "waiting for admission by Kueue's LocalQueue 'team-a'" in status.msg
    job = kube.BatchV1Api(api).list_namespaced_job(kube_namespace).items[0]
    assert job.metadata.labels["kueue.x-k8s.io/queue-name"] == "team-a" and job.spec.suspend

    # What Kueue does when the queue's quota admits the workload.
    kube.BatchV1Api(api).patch_namespaced_job(job.metadata.name, kube_namespace, {"spec": {"suspend": False}})

    assert wait(runner, handle) == AppState.SUCCEEDED


def test_delete_removes_jobs_service_and_pods_and_then_the_app_is_unknown(
    runner: Runner, kube_namespace: str, test_image: TestImage, api: Any
) -> None:
    app = ddp(script=str(JOBS / "sleeper.py"), j="2x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "cancel_grace": 2})
    status_until(runner, handle, lambda status: status.state == AppState.RUNNING)

    scheduler = get_scheduler_factories()["kubernetes"]("test")
    namespace, name = ours(handle)
    scheduler.delete(f"{namespace}:{name}")

    assert runner.status(handle) is None
    left = objects(api, kube_namespace)
    assert left["jobs"] == [] and left["services"] == []
    deadline = time.monotonic() + 20  # pods go in the background, never orphaned
    while objects(api, kube_namespace)["pods"] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert objects(api, kube_namespace)["pods"] == []
    with pytest.raises(ValueError, match=f"unknown kubernetes app '{namespace}:{name}'"):
        scheduler.delete(f"{namespace}:{name}")
    scheduler.close()


def test_log_follows_a_running_pod_to_its_end_with_regex_and_since(
    runner: Runner, kube_namespace: str, test_image: TestImage
) -> None:
    app = ddp("5", script=str(JOBS / "lines.py"), j="1x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace})
    status_until(runner, handle, lambda status: status.state in (AppState.RUNNING, AppState.SUCCEEDED))

    followed = list(runner.log_lines(handle, "lines", 0, regex=r"rank 0 line \d+$", should_tail=True))

    assert [line.rstrip("\n").rsplit(" ", 1)[-1] for line in followed] == ["0", "1", "2", "3", "4"]
    assert wait(runner, handle) == AppState.SUCCEEDED
    import datetime

    future = datetime.datetime.now() + datetime.timedelta(hours=1)
    assert list(runner.log_lines(handle, "lines", 0, since=future)) == []


def _python_role(name: str, code: str, image: str, replicas: int = 1, min_replicas: int | None = None) -> Role:
    return Role(name=name, image=image, entrypoint=sys.executable, args=["-c", code], num_replicas=replicas,
                min_replicas=min_replicas, resource=Resource(cpu=1, gpu=0, memMB=256))


def test_a_failed_role_stops_the_apps_other_roles_and_names_the_failing_replica(
    runner: Runner, kube_namespace: str, test_image: TestImage, docker_client: Any
) -> None:
    app = AppDef("two-roles", roles=[
        _python_role("trainer", "import time, sys; time.sleep(1); sys.exit(3)", test_image.name),
        _python_role("reader", "import time; time.sleep(300)", test_image.name),
    ])
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "cancel_grace": 2})

    assert wait(runner, handle, timeout_s=60) == AppState.FAILED
    status = runner.status(handle)
    assert status is not None
    assert "replica trainer/0" in status.msg and "exited with code 3" in status.msg
    states = {(role.role, replica.id): replica.state for role in status.roles for replica in role.replicas}
    assert states == {("trainer", 0): AppState.FAILED, ("reader", 0): AppState.CANCELLED}
    # The reader's Job was stopped too: none of the app's containers runs on.
    assert kube_leftovers(docker_client)(":".join(ours(handle))) == []


def test_an_elastic_role_runs_on_while_min_replicas_remain_and_index_0_decides_success(
    runner: Runner, kube_namespace: str, test_image: TestImage
) -> None:
    # -j 1:2: index 1 fails for good at once, index 0 finishes its work afterwards.
    code = ("import os, sys, time; index = int(os.environ['JOB_COMPLETION_INDEX']); "
            "sys.exit(5) if index == 1 else time.sleep(3)")
    app = AppDef("elastic", roles=[_python_role("worker", code, test_image.name, replicas=2, min_replicas=1)])
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace})

    assert wait(runner, handle, timeout_s=60) == AppState.SUCCEEDED


def _kueue_keeps_admitted(api: Any, namespace: str, seconds: float) -> None:
    """What Kueue's reconciler does for an admitted workload: a Job of it found suspended is
    un-suspended again (for ``seconds``)."""
    batch = kube.BatchV1Api(api)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for job in batch.list_namespaced_job(namespace, label_selector="kueue.x-k8s.io/queue-name").items:
            finished = any(c.type in ("Failed", "Complete") and c.status == "True" for c in job.status.conditions or [])
            if job.spec.suspend and not finished:
                batch.patch_namespaced_job(job.metadata.name, namespace, {"spec": {"suspend": False}})
        time.sleep(0.2)


@pytest.mark.parametrize("admitted_before_cancel", [True, False])
def test_a_cancelled_queued_job_stays_stopped_when_kueue_admits_it(
    runner: Runner, kube_namespace: str, test_image: TestImage, api: Any, docker_client: Any,
    admitted_before_cancel: bool, kube_cluster: TestCluster
) -> None:
    kube_cluster.add_local_queue(kube_namespace, "team-a")  # with no quota: Kueue admits nothing itself
    app = ddp(script=str(JOBS / "sleeper.py"), j="1x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "queue": "team-a", "cancel_grace": 2})
    if admitted_before_cancel:
        _kueue_keeps_admitted(api, kube_namespace, seconds=0.5)
        wait_for_line(runner, handle, "sleeper", 0, r"running rank 0")

    runner.cancel(handle)
    _kueue_keeps_admitted(api, kube_namespace, seconds=6)

    status = runner.status(handle)
    assert status is not None and status.state == AppState.CANCELLED
    deadline = time.monotonic() + 20
    while objects(api, kube_namespace)["pods"] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert objects(api, kube_namespace)["pods"] == []
    assert kube_leftovers(docker_client)(":".join(ours(handle))) == []
    # Stopped by its deadline once running (Kueue's un-suspending did happen, and did not matter).
    job = kube.BatchV1Api(api).list_namespaced_job(kube_namespace).items[0]
    failed = [c for c in job.status.conditions or [] if c.type == "Failed" and c.status == "True"]
    assert [c.reason for c in failed] == ["DeadlineExceeded"], job.status
    runner_status = runner.status(handle)
    assert runner_status is not None and runner_status.state == AppState.CANCELLED

"""The fake Kubernetes API server, through the real ``kubernetes`` client: REST semantics and errors,
the Job controller's policies, and pods really running on the test Docker engine."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import pytest

from tests.fixtures.docker_engine import TestImage
from tests.kubernetes.apiserver import TestCluster

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

T = TypeVar("T")


@pytest.fixture
def apis(kube_cluster: TestCluster) -> Iterator[tuple[Any, Any]]:
    api_client = config.new_client_from_config()  # from KUBECONFIG, which the fixture set
    yield client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    api_client.close()


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def python_job(name: str, image: TestImage, code: str, completions: int = 1, **spec: Any) -> dict[str, Any]:
    """An Indexed Job whose container runs ``python -c code`` (no shell)."""
    template_spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": image.name, "command": ["python", "-c", code]}]}
    template_spec.update(spec.pop("pod", {}))
    return {"metadata": {"name": name},
            "spec": {"completions": completions, "parallelism": completions, "completionMode": "Indexed",
                     "template": {"spec": template_spec}, **spec}}


def condition(job: Any, kind: str) -> Any:
    return next((c for c in job.status.conditions or [] if c.type == kind and c.status == "True"), None)


def finished(batch: Any, namespace: str, name: str, kind: str = "Complete", timeout: float = 30) -> Any:
    def done() -> Any:
        job = batch.read_namespaced_job(name, namespace)
        return job if condition(job, "Complete") or condition(job, "Failed") else None
    job = wait_for(done, timeout, f"job {name} to finish")
    assert condition(job, kind), job.status
    return job


def body(error: ApiException) -> dict[str, Any]:
    return json.loads(error.body)  # type: ignore[no-any-return]


# -- REST semantics -------------------------------------------------------------------------------

def test_crud_and_errors(apis: tuple[Any, Any], kube_namespace: str) -> None:
    core, batch = apis
    created = core.create_namespaced_service(kube_namespace, {"metadata": {"name": "svc", "labels": {"a": "1"}},
                                                              "spec": {"clusterIP": "None"}})
    assert created.metadata.uid and int(created.metadata.resource_version) > 0
    assert created.metadata.namespace == kube_namespace and created.metadata.creation_timestamp
    assert core.read_namespaced_service("svc", kube_namespace).metadata.uid == created.metadata.uid
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_service(kube_namespace, {"metadata": {"name": "svc"}})
    assert exists.value.status == 409 and body(exists.value)["message"] == 'services "svc" already exists'
    with pytest.raises(ApiException) as missing:
        batch.read_namespaced_job("nope", kube_namespace)
    assert missing.value.status == 404 and body(missing.value)["message"] == 'jobs.batch "nope" not found'
    assert body(missing.value)["reason"] == "NotFound" and body(missing.value)["details"]["kind"] == "jobs"
    with pytest.raises(ApiException) as no_namespace:
        core.create_namespaced_service("nope", {"metadata": {"name": "svc"}})
    assert body(no_namespace.value)["message"] == 'namespaces "nope" not found'
    core.delete_namespaced_service("svc", kube_namespace)
    created_namespace = core.create_namespace({"metadata": {"name": f"{kube_namespace}-x"}})
    assert core.read_namespace(f"{kube_namespace}-x").metadata.uid == created_namespace.metadata.uid
    assert "default" in [n.metadata.name for n in core.list_namespace().items]
    with pytest.raises(ApiException):
        core.read_namespaced_service("svc", kube_namespace)


def test_validation_reports_every_error(apis: tuple[Any, Any], kube_namespace: str) -> None:
    core, batch = apis
    with pytest.raises(ApiException) as bad_job:
        batch.create_namespaced_job(kube_namespace, {"metadata": {"name": "Bad", "labels": {"x": "y" * 64}},
                                                     "spec": {"template": {"spec": {"containers": []}}}})
    status = body(bad_job.value)
    assert bad_job.value.status == 422 and status["reason"] == "Invalid"
    message = status["message"]
    assert message.startswith('Job.batch "Bad" is invalid: [metadata.name: Invalid value: "Bad": a lowercase RFC 1123')
    assert "metadata.labels: Invalid value: \"" + "y" * 64 + "\": must be no more than 63 characters" in message
    assert "spec.template.spec.containers: Required value" in message
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always"' in message
    with pytest.raises(ApiException) as bad_service:
        core.create_namespaced_service(kube_namespace, {"metadata": {"name": "1svc"}})
    assert "a DNS-1035 label must consist" in body(bad_service.value)["message"]
    long_name = "j" * 62
    with pytest.raises(ApiException) as long_indexed:
        batch.create_namespaced_job(kube_namespace, {"metadata": {"name": long_name}, "spec": {
            "completions": 10, "completionMode": "Indexed", "podFailurePolicy": {"rules": []},
            "template": {"spec": {"subdomain": "s", "restartPolicy": "OnFailure",
                                  "containers": [{"name": "c", "image": "i"}]}}}})
    message = body(long_indexed.value)["message"]
    assert "must be no more than 61 characters" in message
    assert 'only "Never" is supported when podFailurePolicy is specified' in message


def test_forbidden_and_injected_failures(apis: tuple[Any, Any], kube_cluster: TestCluster,
                                         kube_namespace: str) -> None:
    core, batch = apis
    kube_cluster.forbidden_namespaces.add("locked")
    with pytest.raises(ApiException) as forbidden:
        batch.create_namespaced_job("locked", {"metadata": {"name": "x"}})
    assert forbidden.value.status == 403
    assert body(forbidden.value)["message"] == ('jobs.batch is forbidden: User "system:serviceaccount:test:test" '
                                                'cannot create resource "jobs" in API group "batch" in the '
                                                'namespace "locked"')
    before = kube_cluster.requests("GET", f"/namespaces/{kube_namespace}/jobs")
    kube_cluster.fail_next(500, count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as failed:
            batch.list_namespaced_job(kube_namespace)
        assert failed.value.status == 500 and body(failed.value)["reason"] == "InternalError"
    assert batch.list_namespaced_job(kube_namespace).items == []
    assert kube_cluster.requests("GET", f"/namespaces/{kube_namespace}/jobs") == before + 3


def test_label_selectors(apis: tuple[Any, Any], kube_namespace: str) -> None:
    core, _ = apis
    for name, labels in (("s1", {"app": "a", "tier": "x"}), ("s2", {"app": "b"}), ("s3", {"app": "c", "tier": "y"})):
        core.create_namespaced_service(kube_namespace, {"metadata": {"name": name, "labels": labels}})

    def names(selector: str) -> list[str]:
        return [s.metadata.name for s in core.list_namespaced_service(kube_namespace, label_selector=selector).items]
    assert names("app=a") == ["s1"]
    assert names("app!=a") == ["s2", "s3"]
    assert names("tier") == ["s1", "s3"]
    assert names("!tier") == ["s2"]
    assert names("app in (a,b),tier") == ["s1"]
    assert names("app notin (a)") == ["s2", "s3"]
    listed = core.list_namespaced_service(kube_namespace)
    assert listed.kind == "ServiceList" and int(listed.metadata.resource_version) > 0


def test_watches_replay_changes_since_a_version_and_end_at_their_timeout(apis: tuple[Any, Any],
                                                                         kube_namespace: str) -> None:
    from kubernetes import watch

    core, _ = apis
    version = core.list_namespaced_service(kube_namespace, label_selector="w=1").metadata.resource_version
    core.create_namespaced_service(kube_namespace, {"metadata": {"name": "w1", "labels": {"w": "1"}}})
    core.create_namespaced_service(kube_namespace, {"metadata": {"name": "other", "labels": {"w": "2"}}})
    core.delete_namespaced_service("w1", kube_namespace)
    started = time.monotonic()
    seen = [(event["type"], event["object"].metadata.name) for event in watch.Watch().stream(
        core.list_namespaced_service, kube_namespace, label_selector="w=1", resource_version=version, timeout_seconds=1)]
    # What happened since ``version``, selected; then nothing more until the server's timeout.
    assert seen == [("DELETED", "w1")]
    assert 0.9 < time.monotonic() - started < 10
    version = core.list_namespaced_service(kube_namespace).metadata.resource_version
    stream = watch.Watch().stream(core.list_namespaced_service, kube_namespace, resource_version=version,
                                  timeout_seconds=10)
    threading.Timer(0.3, lambda: core.create_namespaced_service(kube_namespace, {"metadata": {"name": "w2"}})).start()
    event = next(stream)
    assert (event["type"], event["object"].metadata.name) == ("ADDED", "w2")
    core.patch_namespaced_service("w2", kube_namespace, {"metadata": {"labels": {"x": "y"}}})
    event = next(stream)
    assert (event["type"], event["object"].metadata.labels) == ("MODIFIED", {"x": "y"})


def test_patch_content_types(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    _, batch = apis
    batch.create_namespaced_job(kube_namespace, python_job("p", test_image, "pass", suspend=True))
    # A dict goes as strategic-merge-patch+json, a list as json-patch+json.
    patched = batch.patch_namespaced_job("p", kube_namespace, {"metadata": {"labels": {"k": "v"}}})
    assert patched.metadata.labels == {"k": "v"} and patched.spec.suspend is True
    patched = batch.patch_namespaced_job("p", kube_namespace, [{"op": "remove", "path": "/metadata/labels/k"},
                                                               {"op": "add", "path": "/metadata/labels/n", "value": "1"}])
    assert patched.metadata.labels == {"n": "1"}
    patched = batch.patch_namespaced_job("p", kube_namespace, {"metadata": {"labels": {"n": None}}},
                                         _content_type="application/merge-patch+json")
    assert not patched.metadata.labels
    batch.delete_namespaced_job("p", kube_namespace)


# -- Jobs running on Docker -------------------------------------------------------------------------

def test_indexed_job_runs_to_complete(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    core, batch = apis
    headless = {"clusterIP": "None", "publishNotReadyAddresses": True}
    core.create_namespaced_service(kube_namespace, {"metadata": {"name": "app"},
                                                    "spec": {**headless, "selector": {"job-name": "app"}}})
    core.create_namespaced_service(kube_namespace, {"metadata": {"name": "other"},
                                                    "spec": {**headless, "selector": {"job-name": "nobody"}}})
    # Each pod resolves its own name under the Service (a peer's may be gone once it has exited);
    # a pod under a headless Service that does not select it has no such name.
    code = ("import os, socket\n"
            "def resolves(name):\n"
            "    try:\n        return socket.gethostbyname(name) != ''\n"
            "    except OSError:\n        return False\n"
            "index, subdomain = os.environ['JOB_COMPLETION_INDEX'], os.environ['SUBDOMAIN']\n"
            "print(index, socket.gethostname(), "
            f"resolves(f'{{socket.gethostname()}}.{{subdomain}}.{kube_namespace}.svc.cluster.local'))")
    lost = python_job("lost", test_image, code, pod={"subdomain": "other"})
    lost["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "SUBDOMAIN", "value": "other"}]
    batch.create_namespaced_job(kube_namespace, lost)
    app = python_job("app", test_image, code, completions=2, pod={"subdomain": "app"})
    app["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "SUBDOMAIN", "value": "app"}]
    job = batch.create_namespaced_job(kube_namespace, app)
    done = finished(batch, kube_namespace, "app")
    assert done.status.succeeded == 2 and done.status.completed_indexes == "0-1" and done.status.completion_time
    assert condition(done, "SuccessCriteriaMet").reason == "CompletionsReached"
    pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=app").items
    assert sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    for pod in pods:
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert pod.metadata.name.startswith(f"app-{index}-") and pod.spec.hostname == f"app-{index}"
        assert pod.metadata.owner_references[0].uid == job.metadata.uid
        assert pod.status.phase == "Succeeded"
        assert pod.status.container_statuses[0].state.terminated.reason == "Completed"
        logs = core.read_namespaced_pod_log(pod.metadata.name, kube_namespace, _preload_content=False).data
        assert logs == f"{index} app-{index} True\n".encode()
    finished(batch, kube_namespace, "lost")
    lost_pod = core.list_namespaced_pod(kube_namespace, label_selector="job-name=lost").items[0]
    assert core.read_namespaced_pod_log(lost_pod.metadata.name, kube_namespace, _preload_content=False).data == \
        b"0 lost-0 False\n"


def test_backoff_limit_per_index(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    _, batch = apis
    code = "import os, sys; sys.exit(3 if os.environ['JOB_COMPLETION_INDEX'] == '1' else 0)"
    batch.create_namespaced_job(kube_namespace, python_job("perindex", test_image, code, completions=2,
                                                           backoffLimitPerIndex=1))
    job = finished(batch, kube_namespace, "perindex", "Failed")
    assert condition(job, "Failed").reason == "FailedIndexes"
    assert job.status.failed_indexes == "1" and job.status.completed_indexes == "0" and job.status.failed == 2


def test_pod_failure_policy_fail_job(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    core, batch = apis
    code = "import os, sys, time; time.sleep(60) if os.environ['JOB_COMPLETION_INDEX'] == '1' else sys.exit(7)"
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [7]}}]}
    batch.create_namespaced_job(kube_namespace, python_job("pfp", test_image, code, completions=2,
                                                           podFailurePolicy=policy, podReplacementPolicy="Failed"))
    job = finished(batch, kube_namespace, "pfp", "Failed")
    target = condition(job, "FailureTarget")
    assert target.reason == "PodFailurePolicy" and condition(job, "Failed").reason == "PodFailurePolicy"
    assert target.message.startswith("Container main for pod ") and target.message.endswith(
        "failed with exit code 7 matching FailJob rule at index 0")
    # The failed pod stays (finished pods are kept); the sleeping index's pod was terminated.
    pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=pfp").items
    assert [p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods] == ["0"]
    assert not job.status.active and not job.status.terminating


def test_success_policy(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    _, batch = apis
    code = "import os, time; os.environ['JOB_COMPLETION_INDEX'] == '0' or time.sleep(60)"
    batch.create_namespaced_job(kube_namespace, python_job("leader", test_image, code, completions=2,
                                                           successPolicy={"rules": [{"succeededIndexes": "0"}]}))
    job = finished(batch, kube_namespace, "leader")
    assert condition(job, "SuccessCriteriaMet").reason == "SuccessPolicy"
    assert job.status.completed_indexes == "0" and not job.status.active


def test_suspend_and_resume(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    core, batch = apis
    batch.create_namespaced_job(kube_namespace, python_job("sus", test_image, "import time; time.sleep(60)"))
    selector = "job-name=sus"
    wait_for(lambda: [p for p in core.list_namespaced_pod(kube_namespace, label_selector=selector).items
                      if p.status.phase == "Running"], what="a running pod")
    batch.patch_namespaced_job("sus", kube_namespace, {"spec": {"suspend": True}})
    wait_for(lambda: not core.list_namespaced_pod(kube_namespace, label_selector=selector).items, 15, "no pods")
    job = batch.read_namespaced_job("sus", kube_namespace)
    assert condition(job, "Suspended").reason == "JobSuspended" and not job.status.failed
    batch.patch_namespaced_job("sus", kube_namespace, {"spec": {"suspend": False}})
    wait_for(lambda: core.list_namespaced_pod(kube_namespace, label_selector=selector).items, what="a new pod")
    resumed = [c for c in batch.read_namespaced_job("sus", kube_namespace).status.conditions if c.type == "Suspended"]
    assert resumed[0].status == "False" and resumed[0].reason == "JobResumed"


def test_delete_propagation(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    core, batch = apis
    for name in ("orphaned", "collected"):
        batch.create_namespaced_job(kube_namespace, python_job(name, test_image, "import time; time.sleep(60)"))
    wait_for(lambda: len(core.list_namespaced_pod(kube_namespace).items) == 2, what="two pods")
    batch.delete_namespaced_job("orphaned", kube_namespace)  # batch/v1 default: Orphan
    # DeleteOptions in the body this time (propagation_policy= goes as a query parameter).
    batch.delete_namespaced_job("collected", kube_namespace, body=client.V1DeleteOptions(propagation_policy="Background"))
    wait_for(lambda: not core.list_namespaced_pod(kube_namespace, label_selector="job-name=collected").items, 15,
             "the collected job's pods to go")
    kept = core.list_namespaced_pod(kube_namespace, label_selector="job-name=orphaned").items
    assert len(kept) == 1 and not kept[0].metadata.owner_references and kept[0].status.phase == "Running"
    deleted = core.delete_namespaced_pod(kept[0].metadata.name, kube_namespace, grace_period_seconds=1)
    assert deleted.metadata.deletion_timestamp
    wait_for(lambda: not core.list_namespaced_pod(kube_namespace).items, 15, "the orphan to be deleted")


# -- logs and the kubelet ---------------------------------------------------------------------------

def _pod(name: str, image: str, code: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                                 "containers": [{"name": "main", "image": image,
                                                                 "command": ["python", "-c", code]}], **spec}}


def test_logs_follow_since_and_timestamps(apis: tuple[Any, Any], kube_cluster: TestCluster, test_image: TestImage,
                                         kube_namespace: str) -> None:
    core, _ = apis
    code = ("import sys, time\nprint('early', flush=True)\ntime.sleep(2.5)\n"
            "print('late', flush=True)\ntime.sleep(0.3)\nprint('err', file=sys.stderr, flush=True)\ntime.sleep(0.5)")
    # (stdout and stderr are copied separately: lines written at once may swap, as on a real node)
    core.create_namespaced_pod(kube_namespace, _pod("talker", test_image.name, code))
    wait_for(lambda: core.read_namespaced_pod("talker", kube_namespace).status.phase != "Pending", what="start")
    stream = core.read_namespaced_pod_log("talker", kube_namespace, follow=True, _preload_content=False)
    followed = b"".join(stream.stream())
    assert followed == b"early\nlate\nerr\n"
    stamped = core.read_namespaced_pod_log("talker", kube_namespace, timestamps=True, _preload_content=False).data
    lines = stamped.decode().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["early", "late", "err"]
    assert all(len(line.split(" ")[0]) == 30 and line.split(" ")[0].endswith("Z") for line in lines)
    # 'early' is 3 s old by now; 'late' may be older than 2 s too on a loaded machine.
    recent = core.read_namespaced_pod_log("talker", kube_namespace, since_seconds=2, _preload_content=False).data
    assert recent in (b"late\nerr\n", b"err\n", b"")
    # sinceTime (which the Python client does not offer) at 'late''s own stamp includes it.
    since_time = lines[1].split(" ")[0]
    url = f"{kube_cluster.url}/api/v1/namespaces/{kube_namespace}/pods/talker/log?sinceTime={since_time}"
    with urllib.request.urlopen(url) as response:
        assert response.read() == b"late\nerr\n"
    assert core.read_namespaced_pod_log("talker", kube_namespace, tail_lines=1, _preload_content=False).data == b"err\n"


def test_logs_are_fast_for_many_lines(apis: tuple[Any, Any], test_image: TestImage, kube_namespace: str) -> None:
    core, _ = apis
    core.create_namespaced_pod(kube_namespace, _pod("many", test_image.name,
                                                    "import sys\nfor i in range(120000): print(i)"))
    wait_for(lambda: core.read_namespaced_pod("many", kube_namespace).status.phase == "Succeeded", what="exit")
    started = time.monotonic()
    data = core.read_namespaced_pod_log("many", kube_namespace, _preload_content=False).data
    elapsed = time.monotonic() - started
    assert data.count(b"\n") == 120000 and data.endswith(b"119999\n")
    assert elapsed < 10, elapsed


def test_missing_image_and_termination_message(apis: tuple[Any, Any], test_image: TestImage,
                                               kube_namespace: str) -> None:
    core, _ = apis
    core.create_namespaced_pod(kube_namespace, _pod("noimage", "registry.invalid/nothing:1", "pass"))

    def waiting_reason() -> str | None:
        statuses = core.read_namespaced_pod("noimage", kube_namespace).status.container_statuses or []
        reason = statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else None
        return reason if reason == "ImagePullBackOff" else None
    wait_for(waiting_reason, 10, "ImagePullBackOff")
    with pytest.raises(ApiException) as waiting:
        core.read_namespaced_pod_log("noimage", kube_namespace)
    assert waiting.value.status == 400
    assert body(waiting.value)["message"] == 'container "main" in pod "noimage" is waiting to start: ImagePullBackOff'

    code = "import sys; print('boom'); sys.exit(5)"
    pod = _pod("fallback", test_image.name, code)
    pod["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    core.create_namespaced_pod(kube_namespace, pod)
    core.create_namespaced_pod(kube_namespace, _pod(
        "message", test_image.name, "open('/dev/termination-log', 'w').write('why'); raise SystemExit(2)"))
    for name, message in (("fallback", "boom\n"), ("message", "why")):
        wait_for(partial(lambda pod: core.read_namespaced_pod(pod, kube_namespace).status.phase == "Failed", name),
                 what=f"{name} to fail")
        terminated = core.read_namespaced_pod(name, kube_namespace).status.container_statuses[0].state.terminated
        assert terminated.message == message and terminated.reason == "Error"


def test_scheduling_and_topology(apis: tuple[Any, Any], kube_cluster: TestCluster, test_image: TestImage,
                                 kube_namespace: str) -> None:
    core, _ = apis
    core.create_namespaced_pod(kube_namespace, _pod("elsewhere", test_image.name, "pass",
                                                    nodeSelector={"kubernetes.io/hostname": "node-9"}))
    core.create_namespaced_pod(kube_namespace, _pod("greedy", test_image.name, "pass"))
    greedy = core.read_namespaced_pod("greedy", kube_namespace)
    core.delete_namespaced_pod("greedy", kube_namespace)
    greedy_body = _pod("greedy2", test_image.name, "pass")
    greedy_body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
    core.create_namespaced_pod(kube_namespace, greedy_body)

    def unschedulable(name: str) -> str | None:
        conditions = core.read_namespaced_pod(name, kube_namespace).status.conditions or []
        return next((c.message for c in conditions if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)
    assert wait_for(lambda: unschedulable("elsewhere"), 5) == \
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    assert wait_for(lambda: unschedulable("greedy2"), 5) == "0/1 nodes are available: 1 Insufficient cpu."
    assert greedy.metadata.uid

    saved = (kube_cluster.numa_nodes, kube_cluster.topology_policy)
    kube_cluster.numa_nodes, kube_cluster.topology_policy = [[0], [1]], "single-numa-node"
    try:
        pinned = _pod("pinned", test_image.name, "pass")
        pinned["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2", "memory": "256Mi"}}
        core.create_namespaced_pod(kube_namespace, pinned)
        failed = wait_for(lambda: (p := core.read_namespaced_pod("pinned", kube_namespace)).status.phase == "Failed"
                          and p, 10, "TopologyAffinityError")
        assert failed.status.reason == "TopologyAffinityError"
        assert failed.status.message == "Resources cannot be allocated with Topology locality"
    finally:
        kube_cluster.numa_nodes, kube_cluster.topology_policy = saved


def test_hold_pods(apis: tuple[Any, Any], kube_cluster: TestCluster, test_image: TestImage,
                   kube_namespace: str) -> None:
    core, _ = apis
    kube_cluster.hold_pods("hold=yes")
    pod = _pod("held", test_image.name, "pass")
    pod["metadata"]["labels"] = {"hold": "yes"}
    core.create_namespaced_pod(kube_namespace, pod)
    time.sleep(0.5)
    assert core.read_namespaced_pod("held", kube_namespace).status.phase == "Pending"
    assert not core.read_namespaced_pod("held", kube_namespace).spec.node_name
    kube_cluster.release_pods()
    wait_for(lambda: core.read_namespaced_pod("held", kube_namespace).status.phase == "Succeeded", what="run")


def test_max_failed_indexes_and_backoff_limit(apis: tuple[Any, Any], test_image: TestImage,
                                              kube_namespace: str) -> None:
    _, batch = apis
    code = "import os, sys, time; sys.exit(1) if os.environ['JOB_COMPLETION_INDEX'] == '1' else time.sleep(60)"
    batch.create_namespaced_job(kube_namespace, python_job("maxfailed", test_image, code, completions=3,
                                                           backoffLimitPerIndex=0, maxFailedIndexes=0))
    plain = python_job("plain", test_image, "raise SystemExit(1)", backoffLimit=1)
    plain["spec"].update(completionMode="NonIndexed", completions=1, parallelism=1)
    batch.create_namespaced_job(kube_namespace, plain)
    job = finished(batch, kube_namespace, "maxfailed", "Failed")
    assert condition(job, "FailureTarget").reason == "MaxFailedIndexesExceeded"
    assert condition(job, "Failed").reason == "MaxFailedIndexesExceeded" and job.status.failed_indexes == "1"
    job = finished(batch, kube_namespace, "plain", "Failed")
    assert condition(job, "Failed").reason == "BackoffLimitExceeded" and job.status.failed == 2


def test_foreground_deletion_waits_for_pods(apis: tuple[Any, Any], test_image: TestImage,
                                            kube_namespace: str) -> None:
    core, batch = apis
    batch.create_namespaced_job(kube_namespace, python_job("fg", test_image, "import time; time.sleep(60)"))
    wait_for(lambda: [p for p in core.list_namespaced_pod(kube_namespace).items if p.status.phase == "Running"],
             what="a running pod")
    # The job itself comes back (not a Status): it stays, with a finalizer, until its pods are gone.
    answer = json.loads(batch.delete_namespaced_job("fg", kube_namespace, propagation_policy="Foreground",
                                                    _preload_content=False).data)
    assert answer["metadata"]["deletionTimestamp"] and answer["metadata"]["finalizers"] == ["foregroundDeletion"]

    def gone() -> bool:
        try:
            batch.read_namespaced_job("fg", kube_namespace)
        except ApiException as error:
            return bool(error.status == 404)
        return False
    wait_for(gone, 15, "the job to go after its pods")
    assert not core.list_namespaced_pod(kube_namespace).items


def test_multi_container_pod_and_follow_ending_on_deletion(apis: tuple[Any, Any], test_image: TestImage,
                                                           kube_namespace: str) -> None:
    core, _ = apis
    pod = _pod("pair", test_image.name, "import time; print('one', flush=True); time.sleep(60)")
    pod["spec"]["containers"].append({"name": "side", "image": test_image.name,
                                      "command": ["python", "-c", "print('two')"]})
    core.create_namespaced_pod(kube_namespace, pod)
    wait_for(lambda: core.read_namespaced_pod("pair", kube_namespace).status.phase == "Running", what="running")
    with pytest.raises(ApiException) as ambiguous:
        core.read_namespaced_pod_log("pair", kube_namespace)
    assert body(ambiguous.value)["message"] == "a container name must be specified for pod pair, choose one of: [main side]"
    wait_for(lambda: core.read_namespaced_pod_log("pair", kube_namespace, container="side",
                                                  _preload_content=False).data == b"two\n", 5, "side's log")
    stream = core.read_namespaced_pod_log("pair", kube_namespace, container="main", follow=True,
                                          _preload_content=False)
    first = next(stream.stream(1024))
    assert first == b"one\n"
    started = time.monotonic()
    core.delete_namespaced_pod("pair", kube_namespace, grace_period_seconds=1)
    rest = b"".join(stream.stream(1024))  # ends when the container is stopped and removed
    assert rest == b"" and time.monotonic() - started < 10

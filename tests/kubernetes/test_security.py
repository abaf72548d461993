"""Who may reach a Kubernetes job, on the fake API server.

Pod Security: the server enforces a namespace's ``pod-security.kubernetes.io/enforce`` label on
every pod as the real admission does. A bare pod is refused; ours are admitted and train (without
capabilities or privilege escalation); what cannot be admitted is one
line at submission, with nothing created. NetworkPolicy (``-cfg network_policy``): created with
the app, schema-checked by the server, deleted with it. No network plugin enforces it here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.schedulers import get_scheduler_factories
from torchx.specs import AppState, BindMount, parse_app_handle

from tests.fixtures.docker_engine import TestImage
from tests.conformance.jobs_api import wait
from tests.kubernetes.apiserver import TestCluster
from tests.kubernetes.apiserver.resources import JOBS, NAMESPACES, NETWORK_POLICIES, PODS, SERVICES
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError

JOBS_DIR = Path(__file__).parents[1] / "conformance" / "jobs"


def enforce(cluster: TestCluster, namespace: str, level: str) -> None:
    """What a cluster admin does: ``kubectl label namespace NS pod-security.kubernetes.io/enforce=LEVEL``."""
    cluster.store.update(NAMESPACES, "", namespace, lambda ns: ns["metadata"].setdefault("labels", {}).update(
        {"pod-security.kubernetes.io/enforce": level}))


def nothing_created(cluster: TestCluster, namespace: str) -> bool:
    return not any(cluster.store.list(kind, namespace)[0] for kind in (JOBS, SERVICES, PODS))


def test_a_restricted_namespace_refuses_a_bare_pod_and_runs_ours_as_the_user_given(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage
) -> None:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    enforce(kube_cluster, kube_namespace, "restricted")
    config.load_kube_config()
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
            "spec": {"containers": [{"name": "main", "image": test_image.name, "command": ["true"]}]}}
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api().create_namespaced_pod(kube_namespace, bare)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"].startswith(
        'pods "bare" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false')

    app = ddp(script=str(JOBS_DIR / "whoami.py"), j="2x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "run_as_user": 4321,
                                                "reserved_millicpu": 400})

    assert wait(runner, handle, timeout_s=180) == AppState.SUCCEEDED, runner.status(handle)
    for replica in (0, 1):
        lines = list(runner.log_lines(handle, "whoami", replica))
        # As root (the test kubelet leaves runAsUser out: see containers.py), yet with no capability left.
        assert any("uid 0 no_new_privs 1 CapEff 0000000000000000" in line for line in lines), lines
    pods = kube_cluster.store.list(PODS, kube_namespace)[0]
    assert len(pods) == 2 and all(pod["spec"]["containers"][0]["securityContext"].items() >= {
        "runAsNonRoot": True, "runAsUser": 4321}.items() for pod in pods)


@pytest.mark.parametrize("backend", ["job", "jobset", "volcano"])
def test_without_a_user_a_restricted_namespace_is_refused_at_submission_saying_to_give_one(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage, backend: str
) -> None:
    enforce(kube_cluster, kube_namespace, "restricted")
    app = ddp(script=str(JOBS_DIR / "whoami.py"), j="1x1", cpu=1, image=test_image.name)

    with pytest.raises(InvalidArgumentError) as refused:
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": backend})

    assert str(refused.value) == (
        f"role 'whoami': namespace {kube_namespace!r} refuses its pods: violates PodSecurity \"restricted:latest\": "
        "runAsNonRoot != true (pod or container \"whoami\" must set securityContext.runAsNonRoot=true); "
        "give -cfg run_as_user=UID, a user id the image has")
    assert nothing_created(kube_cluster, kube_namespace)


def test_a_bind_mount_in_a_baseline_namespace_is_one_line_naming_the_volume(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage, tmp_path: Path
) -> None:
    enforce(kube_cluster, kube_namespace, "baseline")
    app = ddp(script=str(JOBS_DIR / "whoami.py"), j="1x1", cpu=1, image=test_image.name,
              mounts=["type=bind", f"src={tmp_path}", "dst=/data"])
    assert isinstance(app.roles[0].mounts[0], BindMount)

    with pytest.raises(InvalidArgumentError, match=r"^role 'whoami': namespace '[^']+' refuses its pods: violates "
                       r"PodSecurity \"baseline:latest\": hostPath volumes \(volumes 'mount-0'\); a bind mount is a "
                       r"hostPath volume: mount a PersistentVolumeClaim \(a volume mount\) instead$"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace})
    assert nothing_created(kube_cluster, kube_namespace)



@pytest.mark.parametrize("backend", ["job", "jobset", "volcano"])
def test_a_network_policy_comes_with_the_app_selects_its_pods_and_goes_with_it(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage, backend: str
) -> None:
    app = ddp(script=str(JOBS_DIR / "whoami.py"), j="2x1", cpu=1, image=test_image.name)
    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": backend, "reserved_millicpu": 400,
                                                "network_policy": True, "network_peers": ["app=prometheus"]})
    app_id = parse_app_handle(handle).app_id
    name = app_id.rsplit(":", 1)[-1]

    policies = kube_cluster.store.list(NETWORK_POLICIES, kube_namespace)[0]
    assert [policy["metadata"]["name"] for policy in policies] == [name]
    selected = policies[0]["spec"]["podSelector"]["matchLabels"]
    assert wait(runner, handle, timeout_s=180) == AppState.SUCCEEDED, runner.status(handle)
    pods = kube_cluster.store.list(PODS, kube_namespace)[0]
    assert len(pods) == 2 and all(pod["metadata"]["labels"].items() >= selected.items() for pod in pods)
    assert policies[0]["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": selected}},
                                                        {"podSelector": {"matchLabels": {"app": "prometheus"}}}]}]

    scheduler = get_scheduler_factories()["kubernetes"]("test")
    scheduler.delete(app_id)
    scheduler.close()
    assert kube_cluster.store.list(NETWORK_POLICIES, kube_namespace)[0] == []

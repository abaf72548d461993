"""``-cfg queue`` on the fake API server: a queue that cannot take the app is refused in one line at
submission, with nothing created; torchx's own use of it (a Volcano queue) works with backend=volcano."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from torchx.runner import Runner

from tests.fixtures.docker_engine import TestImage
from tests.helpers import torchx
from tests.kubernetes.apiserver import TestCluster
from tests.kubernetes.apiserver.resources import JOBS, SERVICES, VOLCANO_JOBS
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError

ECHO = Path(__file__).parents[1] / "conformance" / "jobs" / "echo.py"


def nothing_created(cluster: TestCluster, namespace: str) -> bool:
    return not any(cluster.store.list(kind, namespace)[0] for kind in (JOBS, SERVICES, VOLCANO_JOBS))


@pytest.mark.parametrize("backend", ["job", "jobset"])
def test_a_kueue_queue_the_namespace_lacks_is_refused_naming_the_ones_it_has(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage, backend: str
) -> None:
    kube_cluster.add_local_queue(kube_namespace, "team-b")
    app = ddp(script=str(ECHO), j="1x1", cpu=1, image=test_image.name)

    with pytest.raises(InvalidArgumentError) as refused:
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": backend, "queue": "team-a"})

    assert str(refused.value) == (f"queue 'team-a': namespace {kube_namespace!r} has no Kueue LocalQueue of that name "
                                  "(it has team-b): give one of them, or ask for one to be made")
    assert nothing_created(kube_cluster, kube_namespace)


def test_a_torchx_users_queue_on_a_cluster_with_volcano_and_no_kueue_is_one_line_naming_backend_volcano(
    kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage, tmp_path: Path
) -> None:
    kube_cluster.missing_apis.add("kueue.x-k8s.io")
    ran = torchx("run", "-s", "kubernetes", "-cfg", f"namespace={kube_namespace},queue=default", "--workspace", "",
                 "dist.ddp", "-j", "1x1", "--image", test_image.name, "--script", str(ECHO),
                 env={"PYTHONWARNINGS": "ignore", "KUBECONFIG": os.environ["KUBECONFIG"]}, cwd=tmp_path)

    errors = [line for line in ran.stderr.splitlines() if not line.startswith("torchx 20")]
    assert ran.returncode != 0 and "Traceback" not in ran.stderr, ran.stderr
    assert errors == ["torchx: error: queue 'default' names a Kueue LocalQueue with backend=job, and this cluster has "
                      "no Kueue; it has Volcano, whose queue torchx's kubernetes scheduler submits to: add "
                      "-cfg backend=volcano"], errors
    assert nothing_created(kube_cluster, kube_namespace)


def test_a_queue_on_a_cluster_with_neither_kueue_nor_volcano_says_to_install_kueue(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage
) -> None:
    kube_cluster.missing_apis.update({"kueue.x-k8s.io", "scheduling.volcano.sh"})
    app = ddp(script=str(ECHO), j="1x1", cpu=1, image=test_image.name)

    with pytest.raises(InvalidArgumentError, match=r"no Kueue \(nor Volcano\): install Kueue .* or leave queue out$"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "queue": "default"})
    assert nothing_created(kube_cluster, kube_namespace)


def test_volcano_takes_torchx_users_queue_and_refuses_one_it_lacks(
    runner: Runner, kube_namespace: str, kube_cluster: TestCluster, test_image: TestImage
) -> None:
    app = ddp(script=str(ECHO), j="1x1", cpu=1, image=test_image.name)

    with pytest.raises(InvalidArgumentError, match=r"^queue 'research': the cluster has no Volcano queue of that name "
                                                   r"\(it has default\): give -cfg queue= one of them$"):
        runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": "volcano", "queue": "research"})
    assert nothing_created(kube_cluster, kube_namespace)

    handle = runner.run(app, "kubernetes", cfg={"namespace": kube_namespace, "backend": "volcano", "queue": "default"})
    volcano_jobs = kube_cluster.store.list(VOLCANO_JOBS, kube_namespace)[0]
    runner.cancel(handle)
    assert [job["spec"]["queue"] for job in volcano_jobs] == ["default"]

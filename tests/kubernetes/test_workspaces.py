"""kubernetes workspaces through the real CLI: the workspace is built onto the role's image by the test
engine, pushed to the test registry, and the test kubelet pulls it by digest as a kubelet would.

What a user sees: an edited script runs edited; an unchanged one is neither built nor pushed again;
a pod started again after someone moved the tag runs the code the job was submitted with; a
registry, engine or ``image_repo`` that is missing is one line, and nothing is on the cluster."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import Runner

from tests.fixtures.docker_engine import TestImage
from tests.fixtures.registry import TestRegistry
from tests.helpers import free_port, torchx
from tests.kubernetes.apiserver import TestCluster
from tests.kubernetes.apiserver.resources import CUSTOM, JOBS, PODS, SERVICES
from torchx_ext.schedulers.backends import WORKSPACES

STEP = re.compile(r"^torchx: Step \d+/\d+ : ", re.M)
DIGEST_REF = re.compile(r"[\w.:/-]+@sha256:[0-9a-f]{64}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    # A workspace no engine has seen: the test engine's data (and its build cache) outlives a run on
    # the same machine, and a first build must build.
    (root / "main.py").write_text(f"# {uuid.uuid4().hex}\nprint('CODE VERSION 1', flush=True)\n")
    (root / ".dockerignore").write_text("data/\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 1024)
    return root


def run_in(workspace: Path, image: str, namespace: str, *cfg: str, args: tuple[str, ...] = ("--script", "main.py"),
           backend: str = "job", env: dict[str, str] | None = None) -> Any:
    """``torchx run -s kubernetes --wait --log ... dist.ddp`` from the workspace, which torchx
    passes as the workspace by default."""
    options = ",".join((f"namespace={namespace}", f"backend={backend}", *cfg))
    return torchx("run", "-s", "kubernetes", "-cfg", options, "--wait", "--log", "dist.ddp", "-j", "1x1",
                  "--image", image, *args, cwd=workspace, timeout=300, env=env)


def on_cluster(cluster: TestCluster, namespace: str) -> list[str]:
    return [f"{rtype.plural}/{obj['metadata']['name']}" for rtype in (*CUSTOM, JOBS, PODS, SERVICES)
            for obj in cluster.store.list(rtype, namespace)[0]]


def handle_of(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("kubernetes://"))


@pytest.mark.feature(WORKSPACES, backend="kubernetes")
@pytest.mark.parametrize("backend", ["job", "jobset", "volcano"])
def test_an_edited_script_runs_edited_and_an_unchanged_one_is_not_built_or_pushed_again(
    backend: str, workspace: Path, test_image: TestImage, registry: TestRegistry, kube_namespace: str,
    kube_cluster: TestCluster, runner: Runner,
) -> None:
    repository = registry.repository()
    image_repo = f"image_repo={repository}"
    first = run_in(workspace, test_image.name, kube_namespace, image_repo, backend=backend)
    assert first.returncode == 0, first.stderr
    assert "CODE VERSION 1" in first.stderr
    # Said while it happened: the build's steps, each layer pushed, the digest.
    assert STEP.search(first.stderr) and re.search(r"^torchx: pushing .* layer \w+ (pushed|mounted from)", first.stderr, re.M)
    assert re.search(rf"^torchx: pushed {repository}@sha256:", first.stderr, re.M)
    assert "\r" not in first.stderr  # into a pipe: a plain line per change
    described = runner.describe(handle_of(first.stdout))
    assert described is not None
    pinned = described.roles[0].image
    assert pinned.startswith(f"{repository}@sha256:") and DIGEST_REF.fullmatch(pinned)
    status = torchx("status", handle_of(first.stdout))
    assert f"Image (main): {pinned}" in status.stdout, status.stdout
    pods = [pod["spec"]["containers"][0]["image"] for pod in kube_cluster.store.list(PODS, kube_namespace)[0]]
    assert pods == [pinned]

    (workspace / "main.py").write_text("print('CODE VERSION 2', flush=True)\n")
    edited = run_in(workspace, test_image.name, kube_namespace, image_repo, backend=backend)
    assert edited.returncode == 0, edited.stderr
    assert "CODE VERSION 2" in edited.stderr and "CODE VERSION 1" not in edited.stderr
    if backend != "job":
        return  # the cache is the builder's, whatever runs the pods: timed once

    (workspace / "data" / "big.bin").write_bytes(b"\1" * 2048)  # excluded by .dockerignore
    started = time.monotonic()
    again = torchx("run", "-s", "kubernetes", "-cfg", f"namespace={kube_namespace},{image_repo}", "--dryrun",
                   "dist.ddp", "--image", test_image.name, "--script", "main.py", cwd=workspace)
    unchanged = run_in(workspace, test_image.name, kube_namespace, image_repo)
    took = time.monotonic() - started
    assert unchanged.returncode == 0, unchanged.stderr
    assert not STEP.search(unchanged.stderr) and "pushing" not in unchanged.stderr
    assert "is in the registry already: not pushed" in unchanged.stderr
    assert "CODE VERSION 2" in unchanged.stderr
    assert again.returncode == 0 and not STEP.search(again.stderr) and "pushed at submission" in again.stdout
    print(f"dry run and run of an unchanged workspace: {took:.1f} s")


def test_a_pod_started_again_after_the_tag_moved_runs_the_digest_it_was_submitted_with(
    workspace: Path, test_image: TestImage, registry: TestRegistry, kube_namespace: str,
    kube_cluster: TestCluster, docker_client: Any, runner: Runner, tmp_path: Path,
) -> None:
    repository = registry.repository()
    (workspace / "main.py").write_text(
        "import time\nprint('CODE VERSION 1', flush=True)\ntime.sleep(300)\n")
    # Always: every start of a pod pulls from the registry, so nothing local stands in for it.
    cfg = f"namespace={kube_namespace},image_repo={repository},image_pull_policy=Always"
    submitted = torchx("run", "-s", "kubernetes", "-cfg", cfg, "dist.ddp", "-j", "1x1", "--image", test_image.name,
                       "--max_retries", "2", "--script", "main.py", cwd=workspace, timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    handle = handle_of(submitted.stdout)
    pinned = kube_cluster.store.list(PODS, kube_namespace)[0][0]["spec"]["containers"][0]["image"]
    wait_for_log(runner, handle, "CODE VERSION 1")

    # Someone pushes other code under the job's tag...
    other = tmp_path / "other"
    other.mkdir()
    (other / "Dockerfile").write_text(f"FROM {test_image.name}\nCOPY main.py /main.py\n")
    (other / "main.py").write_text("print('CODE VERSION MOVED', flush=True)\n")
    built, _ = docker_client.images.build(path=str(other), pull=False)
    workspace_tag = next(name for name in docker_client.images.get(pinned).tags if name.startswith(f"{repository}:"))
    built.tag(repository, workspace_tag.rsplit(":", 1)[1])
    for _ in docker_client.api.push(repository, workspace_tag.rsplit(":", 1)[1], stream=True, decode=True):
        pass
    assert docker_client.api.inspect_distribution(workspace_tag)["Descriptor"]["digest"] != pinned.split("@")[1]
    # ...and the job's pod is lost: the Job starts a new one, which pulls what the job names.
    pulls_before = len(kube_cluster.kubelet.pulls)
    pod = kube_cluster.store.list(PODS, kube_namespace)[0][0]["metadata"]["name"]
    kube_cluster.store.remove(PODS, kube_namespace, pod)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = [p for p in kube_cluster.store.list(PODS, kube_namespace)[0] if p["metadata"]["name"] != pod]
        if pods and (pods[0].get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
            break
        time.sleep(0.5)
    assert pods and pods[0]["spec"]["containers"][0]["image"] == pinned
    assert pinned in kube_cluster.kubelet.pulls[pulls_before:]
    lines = wait_for_log(runner, handle, "CODE VERSION")  # the new pod's: the old one is gone
    assert "CODE VERSION MOVED" not in lines
    runner.cancel(handle)


def wait_for_log(runner: Runner, handle: str, text: str) -> str:
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline:
        try:
            seen = "".join(runner.log_lines(handle, "main", 0, should_tail=False))
        except Exception:  # the pod is starting: no log yet
            seen = ""
        if text in seen:
            return seen
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in the log of {handle}: {seen[-2000:]}")


@pytest.mark.parametrize("case", ["no image_repo", "registry down", "no engine"])
def test_what_cannot_be_built_or_pushed_is_one_line_and_nothing_on_the_cluster(
    case: str, workspace: Path, test_image: TestImage, registry: TestRegistry, kube_namespace: str,
    kube_cluster: TestCluster,
) -> None:
    cfg: tuple[str, ...] = (f"image_repo={registry.repository()}",)
    env = None
    if case == "no image_repo":
        cfg = ()
    elif case == "registry down":
        cfg = (f"image_repo=127.0.0.1:{free_port()}/ws",)
    else:
        env = {"DOCKER_HOST": f"unix://{workspace}/no-engine.sock"}
    result = run_in(workspace, test_image.name, kube_namespace, *cfg, env=env)

    errors = [line for line in result.stderr.splitlines() if line.startswith("torchx: error:")]
    assert result.returncode != 0 and len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr
    expected = {
        "no image_repo": r"set -cfg image_repo=REGISTRY/REPO .* --workspace ''",
        "registry down": r"registry 127\.0\.0\.1:\d+ failed \(.*connection refused\).* --workspace ''",
        "no engine": r"no Docker engine answers at unix://.*no-engine\.sock .* --workspace ''",
    }[case]
    assert re.search(expected, errors[0]), errors[0]
    assert on_cluster(kube_cluster, kube_namespace) == []


def test_no_workspace_runs_the_image_as_it_is(
    workspace: Path, test_image: TestImage, kube_namespace: str, kube_cluster: TestCluster,
) -> None:
    (workspace / "main.py").unlink()
    result = torchx("run", "-s", "kubernetes", "-cfg", f"namespace={kube_namespace}", "--workspace", "", "--dryrun",
                    "dist.ddp", "-j", "1x1", "--image", test_image.name, "--script", "main.py", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert f"image: {test_image.name}" in result.stdout and "pushed at submission" not in result.stdout
    assert on_cluster(kube_cluster, kube_namespace) == []

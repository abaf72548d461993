"""Workspace images on the real engine: built once per workspace content, pruned, and used by jobs."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import get_runner
from torchx.specs import AppState

from tests.conformance.jobs_api import wait
from tests.fixtures.docker_engine import TestImage
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.images.progress import StatusLine
from torchx_ext.schedulers.docker.scheduler import DockerScheduler
from torchx_ext.schedulers.images.workspace import (
    GENERATED_DOCKERFILE,
    LABEL_BASE,
    LABEL_DIGEST,
    LABEL_WORKSPACE,
    ensure_workspace_image,
)
from torchx_ext.schedulers.backends import WORKSPACES


@pytest.fixture
def workspace(tmp_path: Path, docker_client: Any) -> Iterator[Path]:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "main.py").write_text("print('WORKSPACE main.py ran')\n")
    (root / ".dockerignore").write_text("*.log\n")
    (root / "debug.log").write_text("not in the image")
    yield root
    for image in docker_client.images.list(filters={"label": f"{LABEL_WORKSPACE}={root.resolve()}"}):
        docker_client.images.remove(image.id, force=True)


def files_in(client: Any, image: str, *paths: str) -> dict[str, bool]:
    container = client.containers.create(image, ["true"])
    try:
        found = {}
        for path in paths:
            try:
                container.get_archive(path)
                found[path] = True
            except Exception:  # the SDK's NotFound
                found[path] = False
        return found
    finally:
        container.remove()


def labels_of(client: Any, image: str, workspace: Path) -> tuple[str, str]:
    labels = client.images.get(image).labels
    assert labels[LABEL_BASE].startswith("sha256:")
    return labels[LABEL_WORKSPACE], labels[LABEL_DIGEST]


def test_an_unchanged_workspace_is_not_built_again(docker_client: Any, test_image: TestImage, workspace: Path) -> None:
    first = ensure_workspace_image(docker_client, test_image.name, str(workspace))
    again = ensure_workspace_image(docker_client, test_image.name, f"file://{workspace}")

    assert first.built and not again.built and again.image == first.image
    assert again.seconds < 2, again  # hashing a small workspace and one image lookup; no build
    assert labels_of(docker_client, first.image, workspace) == (str(workspace.resolve()), first.digest)
    assert files_in(docker_client, first.image, "/main.py", "/debug.log", "/.dockerignore", f"/{GENERATED_DOCKERFILE}") == {
        "/main.py": True, "/debug.log": False, "/.dockerignore": False, f"/{GENERATED_DOCKERFILE}": False,
    }
    (workspace / "debug.log").write_text("ignored: no new image")
    assert not ensure_workspace_image(docker_client, test_image.name, str(workspace)).built
    (workspace / "main.py").write_text("print('changed')\n")
    changed = ensure_workspace_image(docker_client, test_image.name, str(workspace))
    assert changed.built and changed.image != first.image


def test_only_the_newest_images_of_a_workspace_are_kept(
    docker_client: Any, test_image: TestImage, workspace: Path
) -> None:
    made = []
    for version in range(4):
        (workspace / "main.py").write_text(f"print({version})\n")
        made.append(ensure_workspace_image(docker_client, test_image.name, str(workspace), keep=2).image)

    kept = {tag for image in docker_client.images.list(filters={"label": f"{LABEL_WORKSPACE}={workspace.resolve()}"})
            for tag in image.tags}
    assert kept == set(made[-2:])


def test_a_copy_of_a_workspace_elsewhere_has_images_of_its_own(
    docker_client: Any, test_image: TestImage, workspace: Path, tmp_path: Path
) -> None:
    # A clone or worktree with the same files: its images are kept (and pruned) for its own directory.
    copy = tmp_path / "copy"
    shutil.copytree(workspace, copy)
    try:
        first = ensure_workspace_image(docker_client, test_image.name, str(workspace))
        other = ensure_workspace_image(docker_client, test_image.name, str(copy))
        assert other.built and other.image != first.image
        assert labels_of(docker_client, other.image, copy)[0] == str(copy.resolve())
    finally:
        for image in docker_client.images.list(filters={"label": f"{LABEL_WORKSPACE}={copy.resolve()}"}):
            docker_client.images.remove(image.id, force=True)


def test_the_workspace_own_dockerfile_torchx_gets_the_base_as_IMAGE(
    docker_client: Any, test_image: TestImage, workspace: Path
) -> None:
    # torchx's convention: Dockerfile.torchx starts FROM the IMAGE build argument.
    (workspace / "Dockerfile.torchx").write_text("ARG IMAGE\nFROM $IMAGE\nCOPY main.py /app/main.py\n")
    built = ensure_workspace_image(docker_client, test_image.name, str(workspace))

    assert files_in(docker_client, built.image, "/app/main.py", "/main.py") == {"/app/main.py": True, "/main.py": False}
    assert labels_of(docker_client, built.image, workspace) == (str(workspace.resolve()), built.digest)
    (workspace / "Dockerfile.torchx").write_text("ARG IMAGE\nFROM $IMAGE\nCOPY missing.txt /\n")
    with pytest.raises(InvalidArgumentError, match=r"building workspace '.*' on 'torchx-ext-test:.*' failed: .*missing\.txt"):
        ensure_workspace_image(docker_client, test_image.name, str(workspace))


def test_dockerfile_torchx_gets_the_workspace_as_WORKSPACE_and_each_build_step_is_said(
    docker_client: Any, test_image: TestImage, workspace: Path
) -> None:
    # torchx passes the workspace as it was given: file://DIR from torchx 0.7.0's CLI, DIR from nightly's.
    (workspace / "Dockerfile.torchx").write_text(
        "ARG IMAGE\nFROM $IMAGE\nARG WORKSPACE\nLABEL given_workspace=$WORKSPACE\nCOPY main.py /app/main.py\n")
    for given in (f"file://{workspace}", str(workspace)):
        piped = io.StringIO()
        built = ensure_workspace_image(docker_client, test_image.name, given, progress=StatusLine(piped, False))
        assert built.built and docker_client.images.get(built.image).labels["given_workspace"] == given
        said = piped.getvalue().splitlines()
        assert said[0] == f"torchx: building the workspace {workspace.resolve()} on {test_image.name}"
        steps = len(said) - 1  # the Dockerfile's five, and a LABEL step per label of ours
        assert steps >= 5 and [line.split(" : ")[0] for line in said[1:]] == [
            f"torchx: Step {n}/{steps}" for n in range(1, steps + 1)]
    terminal = io.StringIO()
    (workspace / "main.py").write_text("print('changed')\n")
    ensure_workspace_image(docker_client, test_image.name, str(workspace), progress=StatusLine(terminal, True))
    assert terminal.getvalue().count("\r\x1b[Ktorchx: Step ") >= 5 and terminal.getvalue().endswith("\n")
    assert terminal.getvalue().count("\n") == 1  # one line, redrawn in place


def test_a_workspace_path_that_dockerfile_quoting_would_change_is_labelled_as_it_is(
    docker_client: Any, test_image: TestImage, tmp_path: Path
) -> None:
    root = tmp_path / 'my "work" $HOME space'
    root.mkdir()
    (root / "main.py").write_text("")
    try:
        built = ensure_workspace_image(docker_client, test_image.name, str(root))
        assert labels_of(docker_client, built.image, root) == (str(root.resolve()), built.digest)
    finally:
        for image in docker_client.images.list(filters={"label": f"{LABEL_WORKSPACE}={root.resolve()}"}):
            docker_client.images.remove(image.id, force=True)


def test_a_missing_base_image_says_what_to_do(docker_client: Any, workspace: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"image 'torchx-ext-no-such:1' .* is not on the engine.*docker pull"):
        ensure_workspace_image(docker_client, "torchx-ext-no-such:1", str(workspace))


@pytest.mark.feature(WORKSPACES, backend="local_docker")
def test_a_job_runs_its_workspace_and_a_second_run_builds_nothing(
    docker_client: Any, test_image: TestImage, workspace: Path
) -> None:
    scheduler = DockerScheduler("test")
    try:
        with get_runner() as runner:
            handles = []
            for _ in range(2):
                # A new AppDef each time, as each `torchx run` makes: torchx 0.7.0 puts the built
                # image into the AppDef it is given.
                app = ddp(script="main.py", j="1x1", image=test_image.name, mounts=list(test_image.mount_options))
                handles.append(runner.run(app, "local_docker", cfg={}, workspace=str(workspace)))
            for handle in handles:
                assert wait(runner, handle) == AppState.SUCCEEDED
                assert any("WORKSPACE main.py ran" in line for line in runner.log_lines(handle, "main", 0))
        images = docker_client.images.list(filters={"label": f"{LABEL_WORKSPACE}={workspace.resolve()}"})
        assert len(images) == 1
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": "torchx_ext.app_name=main"}):
            scheduler.delete(container.labels["torchx_ext.app_id"])
        scheduler.close()

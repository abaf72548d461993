"""The first-step benchmark's local_docker side: the engine, the base image, each side's
``torchx run`` arguments, and the cleaning up of what the runs left.

No registry is needed: the base image (torchx-ext-bench:latest) is imported from an almost empty
root (tests/fixtures/docker_engine.py) when the engine lacks it, and kept; /usr, the Python
installation and this checkout (which holds both environments) are bind-mounted read-only into
the containers, with each side's environment first on PATH. The engine is DOCKER_HOST's, else the
private test engine's socket (``bash scripts/docker_engine.sh start``)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_SOCKET = Path("/tmp/torchx-ext-docker/docker.sock")
BASE_IMAGE = "torchx-ext-bench:latest"
APP_LABELS = ("torchx_ext.app_id", "torchx.pytorch.org/app-id")  # ours, torchx's builtin
OUR_WORKSPACE_LABEL = "torchx_ext.workspace"
THEIR_NETWORK = "torchx"


def connect() -> Any:
    """A client of the engine; None (said) when none answers."""
    import docker

    if not os.environ.get("DOCKER_HOST") and PRIVATE_SOCKET.is_socket():
        os.environ["DOCKER_HOST"] = f"unix://{PRIVATE_SOCKET}"  # the runs' CLIs inherit it
    where = os.environ.get("DOCKER_HOST", "the default socket")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as error:  # the SDK raises its own, requests' and OS errors
        print(f"local_docker: no Docker engine answers at {where} ({type(error).__name__}): left out (run "
              "`bash scripts/docker_engine.sh start`)", flush=True)
        return None
    return client


def ensure_base_image(client: Any) -> None:
    import docker.errors

    from tests.fixtures.docker_engine import root_filesystem

    try:
        client.images.get(BASE_IMAGE)
        return
    except docker.errors.ImageNotFound:
        pass
    answer = str(client.api.import_image_from_data(root_filesystem()))
    found = re.search(r"sha256:[0-9a-f]{64}", answer)
    if found is None:
        raise SystemExit(f"importing the base image failed: {answer.strip()[-500:]}")
    repository, tag = BASE_IMAGE.split(":")
    client.images.get(found.group(0)).tag(repository, tag)  # tagged after import (Podman drops an import's tag)
    print(f"imported the base image {BASE_IMAGE} (kept afterwards)", flush=True)


def run_arguments(venv: Path, workspace: Path, script: str) -> list[str]:
    mounts = [f"type=bind,src={path},dst={path},readonly"
              for path in ("/usr", str(Path(sys.base_prefix).resolve()), str(ROOT))]
    # Both CLIs take the workspace as file://DIR; the builders copy it to the image's working
    # directory, so the script is found by its bare name.
    return ["run", "-s", "local_docker", "--workspace", f"file://{workspace}", "--wait", "dist.ddp", "-j", "2x2",
            "--image", BASE_IMAGE, "--mounts", ",".join(mounts),
            "--env", f"PATH={venv / 'bin'}:/usr/local/bin:/usr/bin:/bin,LOGLEVEL=WARNING", "--script", script]


@dataclass(frozen=True)
class EngineContents:
    containers: frozenset[str]
    images: frozenset[str]
    networks: frozenset[str]
    volumes: frozenset[str]


def engine_contents(client: Any) -> EngineContents:
    return EngineContents(frozenset(container.id for container in client.containers.list(all=True)),
                          frozenset(image.id for image in client.images.list(all=True)),
                          frozenset(network.name for network in client.networks.list()),
                          frozenset(volume.name for volume in client.volumes.list()))


def clean_up(client: Any, workspace: Path, before: EngineContents) -> None:
    """Removes the jobs' containers, networks, volumes and images that the runs made."""
    import docker.errors

    images: set[str] = set()
    for label in APP_LABELS:
        selector = {"label": label}
        for container in client.containers.list(all=True, filters=selector):
            if container.id not in before.containers:
                images.add(container.attrs.get("Image", ""))
                container.remove(force=True, v=True)
        for network in client.networks.list(filters=selector):
            if network.name not in before.networks:
                network.remove()
        for volume in client.volumes.list(filters=selector):
            if volume.name not in before.volumes:
                volume.remove(force=True)
    images.update(image.id for image in client.images.list(filters={"label": f"{OUR_WORKSPACE_LABEL}={workspace}"}))
    for image_id in sorted(images - before.images - {""}):
        try:
            client.images.remove(image_id, force=True)  # its untagged parents (the build's steps) go with it
        except docker.errors.NotFound:
            pass
    if THEIR_NETWORK not in before.networks:
        for network in client.networks.list(names=[THEIR_NETWORK]):
            if network.name == THEIR_NETWORK and not network.attrs.get("Containers"):
                network.remove()

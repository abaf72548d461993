"""kubernetes workspaces, with torchx's contract: the workspace is built onto the role's image by a
local engine (``DOCKER_HOST``), pushed to ``-cfg image_repo``, and the pods run it.

Unlike torchx's builtin, the pods name the image by the digest the push returned
(``REPO@sha256:...``), not by a tag: a later push to the tag cannot change what a running job, or
one of its pods started again later, runs. The build is local_docker's, cached by content, so an
unchanged workspace is neither built nor pushed again (``images/registry.py``).

The dry-run builds (as torchx's does) but pushes nothing: its manifests name ``REPO:TAG`` and say
so; ``schedule`` pushes, then creates the objects with the digest in their place. Whatever fails
before (no ``image_repo``, no engine, a failed build or push) is one line, and nothing is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchx.specs import Role, runopts

from torchx_ext.errors import EngineError, InvalidArgumentError
from torchx_ext.schedulers.common.workspace_files import workspace_path
from torchx_ext.schedulers.images.progress import StatusLine
from torchx_ext.schedulers.images.registry import REPOSITORY_FORMS, check_repository, publish
from torchx_ext.schedulers.kubernetes.pods import TORCHX_IMAGE_ENV

WORKSPACE_KEPT = 3
"""Local workspace images kept per workspace directory (the registry keeps what was pushed)."""


@dataclass(frozen=True)
class PendingPush:
    """A workspace image the dry-run built, named ``reference`` (``REPO:TAG``) until pushed."""

    reference: str
    image: str
    """The local image (``torchx-ext-workspace:TAG``)."""
    repository: str
    tag: str


def add_workspace_opts(opts: runopts) -> None:
    """torchx's ``image_repo`` and ``quiet``, with torchx's names and meanings."""
    opts.add("image_repo", type_=str, default=None,
             help="the repository the workspace's image is pushed to, which the cluster's nodes pull from: "
             f"{REPOSITORY_FORMS} (needed with a workspace; --workspace '' runs the role's image as it is)")
    opts.add("quiet", type_=bool, default=False,
             help="say nothing of the workspace image's build steps (its push is still said)")


def build_workspace_image(role: Role, workspace: str, cfg: Mapping[str, Any]) -> PendingPush:
    """Builds ``workspace`` onto ``role``'s image (unless built before) and names the role's image
    ``REPO:TAG``, pushed at submission."""
    from torchx_ext.schedulers.images.workspace import ensure_workspace_image

    root = workspace_path(workspace, "kubernetes")
    repository = cfg.get("image_repo")
    if not repository:
        raise InvalidArgumentError(
            f"the workspace {root} runs on kubernetes as an image pushed to a registry the cluster pulls from: "
            "set -cfg image_repo=REGISTRY/REPO (e.g. 127.0.0.1:5000/team/train), or run the role's image as it is "
            "with --workspace ''")
    check_repository(str(repository))
    engine = _local_client(f"builds the workspace {root} into an image")
    progress = StatusLine.on_stderr(quiet=bool(cfg.get("quiet")))
    built = ensure_workspace_image(engine, role.image, workspace, keep=WORKSPACE_KEPT, progress=progress,
                                   scheduler="kubernetes")
    tag = built.image.rsplit(":", 1)[1]
    push = PendingPush(f"{repository}:{tag}", built.image, str(repository), tag)
    role.image = push.reference
    return push


def push_and_pin(objects: tuple[dict[str, Any], ...], pushes: tuple[PendingPush, ...]) -> tuple[dict[str, Any], ...]:
    """Pushes each image (unless the registry has it) and returns ``objects`` with every container
    naming its digest instead of its tag."""
    if not pushes:
        return objects
    client = _local_client("pushes the workspace's image")
    progress = StatusLine.on_stderr()
    pinned = {push.reference: publish(client, push.image, push.repository, push.tag, progress) for push in pushes}
    return tuple(_replace_images(obj, pinned) for obj in objects)


def _local_client(doing: str) -> Any:
    """A client of the engine ``DOCKER_HOST`` names; else one line saying what it was for and the way around it."""
    from torchx_ext.schedulers.images.client import connect_client

    try:
        return connect_client()[0]
    except EngineError as error:
        raise EngineError(f"kubernetes {doing} with a local engine, and {error}; or run the role's image as it "
                          "is with --workspace ''") from None


def _replace_images(value: Any, pinned: Mapping[str, str]) -> Any:
    if isinstance(value, dict) and value.get("name") == TORCHX_IMAGE_ENV and value.get("value") in pinned:
        return {**value, "value": pinned[value["value"]]}
    if isinstance(value, dict):
        return {key: (pinned.get(item, item) if key == "image" and isinstance(item, str) else
                      _replace_images(item, pinned)) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_images(item, pinned) for item in value]
    return value

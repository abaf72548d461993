"""Workspace images: the role's image with the workspace copied on top, cached by content.

torchx's builtin rebuilds the image on every ``torchx run`` (13.6 s for a trivial job on the
test machine). Here the workspace's directory, its files (minus what ``.dockerignore``/
``.torchxignore`` exclude) and the base image's id are hashed, and the image is tagged with that
hash: an unchanged workspace finds its image and starts with no build at all. Only the newest
few images per workspace directory are kept; the directory is in the hash so that two copies of
one project (clones, worktrees) each have images of their own to keep.

Which files go in: ``common/workspace_files.py`` (``.dockerignore`` then ``.torchxignore``).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.workspace_files import IGNORE_FILES, unreadable, workspace_files, workspace_path
from torchx_ext.schedulers.images.client import engine_call, explanation
from torchx_ext.schedulers.images.progress import StatusLine, build_step, event_error

IMAGE_REPOSITORY = "torchx-ext-workspace"
LABEL_WORKSPACE = "torchx_ext.workspace"
LABEL_DIGEST = "torchx_ext.workspace_digest"
LABEL_BASE = "torchx_ext.base_image"
USER_DOCKERFILE = "Dockerfile.torchx"
GENERATED_DOCKERFILE = "Dockerfile.torchx_ext"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class WorkspaceImage:
    image: str
    digest: str
    built: bool
    seconds: float


def workspace_digest(root: Path, base_image_id: str, files: list[str] | None = None) -> str:
    """sha256 of the base id, the directory, and each file's path, kind, executable bit and
    content (or link)."""
    digest = hashlib.sha256(f"base {base_image_id}\0{root.resolve()}\0".encode())
    for relative in workspace_files(root) if files is None else files:
        path = root / relative
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            digest.update(f"link {relative}\0{os.readlink(path)}\0".encode())
            continue
        # The size delimits the content, so no two workspaces hash the same byte stream.
        digest.update(f"file {relative}\0{'x' if info.st_mode & 0o111 else '-'}\0{info.st_size}\0".encode())
        with open(path, "rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def build_context(root: Path, dockerfile: str, files: list[str] | None = None) -> IO[bytes]:
    """A tar (temporary file, rewound) of the workspace's files and the Dockerfile to build.

    ``dockerfile`` is the text of the generated one, used unless the workspace has its own
    ``Dockerfile.torchx``. The caller closes the file.
    """
    files = workspace_files(root) if files is None else files
    context = tempfile.TemporaryFile()
    with tarfile.open(fileobj=context, mode="w") as archive:
        for relative in files:
            if relative not in IGNORE_FILES:  # applied already; the builder would apply them again
                archive.add(root / relative, arcname=relative, recursive=False)
        name = _dockerfile_name(files)
        if name == GENERATED_DOCKERFILE:
            _add_text(archive, name, dockerfile)
        # The classic builder drops the Dockerfile and .dockerignore from the context when
        # .dockerignore names them, which keeps them out of `COPY . .`.
        _add_text(archive, ".dockerignore", f"{name}\n.dockerignore\n")
    context.seek(0)
    return context


def ensure_workspace_image(client: Any, base_image: str, workspace: str, keep: int = 3,
                           progress: StatusLine | None = None, scheduler: str = "local_docker") -> WorkspaceImage:
    """The image of ``workspace`` on ``base_image``, built only if no image has its content;
    ``progress`` says each build step (None: nothing is said)."""
    import docker.errors

    started = time.monotonic()
    root = workspace_path(workspace, scheduler)
    if keep < 1:
        raise InvalidArgumentError(f"invalid workspace_images_kept {keep!r}: expected 1 or more")
    progress = progress or StatusLine(None, False)
    base_id = _base_image_id(client, base_image, progress)
    files = workspace_files(root)
    user_dockerfile = _dockerfile_name(files) == USER_DOCKERFILE
    # A Dockerfile.torchx of the user's may read the WORKSPACE argument, whose text (file://DIR on
    # torchx 0.7.0, DIR on nightly) then decides the image as much as the files do.
    try:
        digest = workspace_digest(root, base_id + (f"\0{workspace}" if user_dockerfile else ""), files)
    except OSError as error:
        raise unreadable(root, error) from None
    tag = f"{IMAGE_REPOSITORY}:{digest[:16]}"
    try:
        client.images.get(tag)
        return WorkspaceImage(tag, digest, False, time.monotonic() - started)
    except docker.errors.ImageNotFound:
        pass
    labels = {LABEL_WORKSPACE: str(root), LABEL_DIGEST: digest, LABEL_BASE: base_id}
    # The SDK's labels= makes one LABEL step, so one layer commit, per label (0.7 s each on the
    # test engine's vfs storage); the generated Dockerfile sets them in one step instead, unless
    # a value holds characters that Dockerfile quoting would change.
    inline = not user_dockerfile and all(re.fullmatch(r"[\w./:@+=,-]*", value) for value in labels.values())
    label_line = "LABEL " + " ".join(f'{key}="{value}"' for key, value in labels.items()) if inline else ""
    progress.show(f"building the workspace {root} on {base_image}")
    try:
        _build(client, root, base_image, base_id, workspace, tag, files, labels, inline, label_line, progress)
    finally:
        progress.close()
    image = client.images.get(tag)
    _prune(client, root, keep, image.id)
    return WorkspaceImage(tag, digest, True, time.monotonic() - started)


def _build(client: Any, root: Path, base_image: str, base_id: str, workspace: str, tag: str, files: list[str],
           labels: dict[str, str], inline: bool, label_line: str, progress: StatusLine) -> None:
    try:
        context = build_context(root, f"FROM {base_id}\nCOPY . .\n{label_line}\n", files)
    except OSError as error:
        raise unreadable(root, error) from None
    with context:
        # pull=False: the engine may have no network, and the base is local by its id. IMAGE and
        # WORKSPACE are the build arguments torchx's own Dockerfile.torchx convention passes.
        events = engine_call(lambda: client.api.build(
            fileobj=context, custom_context=True, dockerfile=_dockerfile_name(files), tag=tag, rm=True,
            pull=False, buildargs={"IMAGE": base_id, "WORKSPACE": str(workspace)},
            labels=None if inline else labels, decode=True,
        ), client.api.base_url, "build the workspace image")
        output: list[str] = []
        for event in events:
            failure = event_error(event)
            if failure is not None:
                tail = " | ".join(output[-5:])
                raise InvalidArgumentError(f"building workspace {str(root)!r} on {base_image!r} failed: {failure}"
                                           + (f" ({tail})" if tail else ""))
            step = build_step(event)
            if step is not None:
                progress.show(step)
            text = str(event.get("stream") or "").strip()
            if text and step is None and not text.startswith("--->"):
                output.append(text)


def _base_image_id(client: Any, base_image: str, progress: StatusLine) -> str:
    """The base image's id, pulled first when the engine lacks it (as torchx's builder does)."""
    import docker.errors

    try:
        return str(client.images.get(base_image).id)
    except docker.errors.ImageNotFound:
        pass
    progress.show(f"pulling the base image {base_image}")
    try:
        return str(client.images.pull(base_image).id)
    except docker.errors.APIError as error:
        raise InvalidArgumentError(
            f"image {base_image!r} (the workspace's base) is not on the engine, and pulling it failed ({explanation(error)}): "
            f"`docker pull {base_image}` or `docker build -t {base_image} .` it first"
        ) from None
    finally:
        progress.close()


def _prune(client: Any, root: Path, keep: int, built_id: str) -> None:
    import docker.errors

    images = client.images.list(filters={"label": f"{LABEL_WORKSPACE}={root}"})
    # The image just built stays whatever the clock says; the others newest first.
    images.sort(key=lambda image: (image.id == built_id, _created_ns(image)), reverse=True)
    for image in images[keep:]:
        # By each of its names: one pushed to a registry has two (ours and REPO:TAG, and a digest),
        # and the engine refuses to remove such an image by its id.
        for name in [*image.tags, *(image.attrs.get("RepoDigests") or []), image.id]:
            try:
                client.images.remove(name, noprune=False)
            except docker.errors.NotFound:
                break  # its last name went with the one before
            except docker.errors.APIError:
                break  # still used by a job's containers (kept until `torchx delete`): next time


def _created_ns(image: Any) -> int:
    # RFC 3339 with the nanoseconds' trailing zeros dropped, so the text does not sort in time:
    # "…:01.5Z" > "…:01.52Z" and "…:01Z" > "…:01.5Z" (builds a second apart are common).
    created = image.attrs.get("Created", 0)
    if isinstance(created, int):
        return created * 10**9
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$", str(created))
    if not match:
        return 0
    seconds = datetime.fromisoformat(match[1] + (match[3] or "Z").replace("Z", "+00:00")).timestamp()
    return int(seconds) * 10**9 + int((match[2] or "0")[:9].ljust(9, "0"))


def _dockerfile_name(files: list[str]) -> str:
    return USER_DOCKERFILE if USER_DOCKERFILE in files else GENERATED_DOCKERFILE


def _add_text(archive: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))

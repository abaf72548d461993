"""Workspace images: the role's image with the workspace copied on top, cached by content.

torchx's builtin rebuilds the image on every ``torchx run`` (13.6 s for a trivial job on the
test machine). Here the workspace's files (minus what ``.dockerignore``/``.torchxignore``
exclude) and the base image's id are hashed, and the image is tagged with that hash: an
unchanged workspace finds its image and starts with no build at all. Only the newest few
images per workspace directory are kept.

Ignore rules follow ``.dockerignore``: ``*`` and ``?`` within one path segment, ``**`` across
segments, ``[...]`` classes, a leading ``/`` ignored, ``!`` re-includes, the last matching
pattern wins, and a pattern that matches a directory excludes everything under it. Not
supported: escapes with ``\\`` inside patterns.
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
from pathlib import Path
from typing import IO, Any

from torchx_ext.errors import InvalidArgumentError

IMAGE_REPOSITORY = "torchx-ext-workspace"
LABEL_WORKSPACE = "torchx_ext.workspace"
LABEL_DIGEST = "torchx_ext.workspace_digest"
LABEL_BASE = "torchx_ext.base_image"
IGNORE_FILES = (".dockerignore", ".torchxignore")
USER_DOCKERFILE = "Dockerfile.torchx"
GENERATED_DOCKERFILE = "Dockerfile.torchx_ext"
WORKSPACE_FORMS = "a directory path or file://DIR (--workspace '' runs the image as it is)"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class WorkspaceImage:
    image: str
    digest: str
    built: bool
    seconds: float


def workspace_path(workspace: str) -> Path:
    """The directory ``workspace`` names: torchx 0.7.0 passes ``file://DIR``, nightly a path."""
    text = str(workspace)
    scheme, separator, rest = text.partition("://")
    if separator:
        if scheme != "file":
            raise InvalidArgumentError(f"unsupported workspace {text!r}: local_docker takes {WORKSPACE_FORMS}")
        text = rest
    path = Path(text).expanduser()
    if not path.is_dir():
        raise InvalidArgumentError(f"workspace {workspace!r} is not a directory: give {WORKSPACE_FORMS}")
    return path.resolve()


def workspace_files(root: Path) -> list[str]:
    """The files (and symlinks) that go into the image, as sorted relative POSIX paths."""
    rules = _ignore_rules(root)
    can_prune = not any(negated for negated, _ in rules)
    found = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        relative_dir = Path(directory).relative_to(root).as_posix()
        prefix = "" if relative_dir == "." else f"{relative_dir}/"
        if can_prune:
            dirnames[:] = [name for name in dirnames if not _ignored(f"{prefix}{name}", rules)]
        entries = filenames + [name for name in dirnames if os.path.islink(os.path.join(directory, name))]
        for name in entries:
            relative = f"{prefix}{name}"
            if not _ignored(relative, rules):
                found.append(relative)
    return sorted(found)


def workspace_digest(root: Path, base_image_id: str, files: list[str] | None = None) -> str:
    digest = hashlib.sha256(f"base {base_image_id}\n".encode())
    for relative in workspace_files(root) if files is None else files:
        path = root / relative
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            digest.update(f"link {relative}\0{os.readlink(path)}\0".encode())
            continue
        digest.update(f"file {relative}\0{'x' if info.st_mode & 0o111 else '-'}\0{info.st_size}\0".encode())
        with open(path, "rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def build_context(root: Path, base_image_id: str, files: list[str], into: IO[bytes]) -> None:
    """A tar of ``files`` and the Dockerfile that puts them on the base image."""
    dockerfile = GENERATED_DOCKERFILE
    with tarfile.open(fileobj=into, mode="w") as archive:
        for relative in files:
            if relative in IGNORE_FILES:
                continue  # applied already; the builder would apply them again
            archive.add(root / relative, arcname=relative, recursive=False)
        if USER_DOCKERFILE in files:
            dockerfile = USER_DOCKERFILE
        else:
            _add_text(archive, GENERATED_DOCKERFILE, f"FROM {base_image_id}\nCOPY . .\n")
        # Keeps the Dockerfile and this file out of `COPY . .`.
        _add_text(archive, ".dockerignore", f"{dockerfile}\n.dockerignore\n")
    into.seek(0)


def ensure_workspace_image(client: Any, base_image: str, workspace: str, keep: int = 3) -> WorkspaceImage:
    """The image of ``workspace`` on ``base_image``, built only if no image has its content."""
    import docker.errors

    started = time.monotonic()
    root = workspace_path(workspace)
    if keep < 1:
        raise InvalidArgumentError(f"invalid workspace_images_kept {keep!r}: expected 1 or more")
    try:
        base_id = client.images.get(base_image).id
    except docker.errors.ImageNotFound:
        raise InvalidArgumentError(
            f"image {base_image!r} (the workspace's base) is not on the engine, and no registry may be "
            f"reachable: `docker pull {base_image}` or `docker build -t {base_image} .` it first"
        ) from None
    files = workspace_files(root)
    digest = workspace_digest(root, base_id, files)
    tag = f"{IMAGE_REPOSITORY}:{digest[:16]}"
    try:
        client.images.get(tag)
        return WorkspaceImage(tag, digest, False, time.monotonic() - started)
    except docker.errors.ImageNotFound:
        pass
    with tempfile.TemporaryFile() as context:
        build_context(root, base_id, files, context)
        dockerfile = USER_DOCKERFILE if USER_DOCKERFILE in files else GENERATED_DOCKERFILE
        try:
            client.images.build(
                fileobj=context, custom_context=True, dockerfile=dockerfile, tag=tag, rm=True, pull=False,
                labels={LABEL_WORKSPACE: str(root), LABEL_DIGEST: digest, LABEL_BASE: base_id},
            )
        except docker.errors.BuildError as error:
            tail = [str(entry.get("stream", entry.get("error", ""))).strip() for entry in error.build_log][-5:]
            raise InvalidArgumentError(
                f"building workspace {str(root)!r} on {base_image!r} failed: {error.msg} "
                f"({' | '.join(line for line in tail if line)})"
            ) from None
    _prune(client, root, keep)
    return WorkspaceImage(tag, digest, True, time.monotonic() - started)


def _prune(client: Any, root: Path, keep: int) -> None:
    import docker.errors

    images = client.images.list(filters={"label": f"{LABEL_WORKSPACE}={root}"})
    images.sort(key=lambda image: image.attrs.get("Created", ""), reverse=True)
    for image in images[keep:]:
        try:
            client.images.remove(image.id, noprune=False)
        except docker.errors.APIError:
            pass  # still used by a job's containers (kept until `torchx delete`): next time


def _ignore_rules(root: Path) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for name in IGNORE_FILES:
        try:
            text = (root / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            pattern = line.strip()
            if not pattern or pattern.startswith("#"):
                continue
            negated = pattern.startswith("!")
            pattern = os.path.normpath(pattern.lstrip("!").strip().lstrip("/")).replace(os.sep, "/")
            if pattern in (".", ""):
                continue
            rules.append((negated, re.compile(_regex(pattern))))
    return rules


def _regex(pattern: str) -> str:
    out = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            index += 2
            if pattern.startswith("/", index):
                index += 1
                out.append("(?:.*/)?")  # zero or more whole segments
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", index + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1:end]
                out.append(f"[{'^' + body[1:] if body.startswith('!') else body}]")
                index = end
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def _ignored(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    # A path is matched as itself and as each of its parent directories.
    parts = relative.split("/")
    candidates = ["/".join(parts[: end + 1]) for end in range(len(parts))]
    excluded = False
    for negated, pattern in rules:
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            excluded = not negated
    return excluded


def _add_text(archive: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))

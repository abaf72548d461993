"""Workspace images: the role's image with the workspace copied on top, cached by content.

torchx's builtin rebuilds the image on every ``torchx run`` (13.6 s for a trivial job on the
test machine). Here the workspace's directory, its files (minus what ``.dockerignore``/
``.torchxignore`` exclude) and the base image's id are hashed, and the image is tagged with that
hash: an unchanged workspace finds its image and starts with no build at all. Only the newest
few images per workspace directory are kept; the directory is in the hash so that two copies of
one project (clones, worktrees) each have images of their own to keep.

Ignore patterns are read as Docker reads ``.dockerignore`` (moby's patternmatcher): ``#``
comments at the start of a line, a leading ``/`` dropped, ``*`` and ``?`` within one path
segment, ``**`` across segments, ``[...]`` classes (``[^...]`` negates, ``[!...]`` does not),
``\\`` escapes, ``!`` re-includes, the last matching pattern wins, and a pattern that matches a
directory excludes everything under it. Both files apply, ``.torchxignore``'s patterns last.
Differences from ``docker build``: an exception can re-include a file under an excluded
directory even when it starts with a wildcard (``data`` then ``!*/keep``), as BuildKit does but
the classic CLI does not; empty directories, sockets and FIFOs are not copied; symlinks are
copied as links, never followed.
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

IMAGE_REPOSITORY = "torchx-ext-workspace"
LABEL_WORKSPACE = "torchx_ext.workspace"
LABEL_DIGEST = "torchx_ext.workspace_digest"
LABEL_BASE = "torchx_ext.base_image"
IGNORE_FILES = (".dockerignore", ".torchxignore")
USER_DOCKERFILE = "Dockerfile.torchx"
GENERATED_DOCKERFILE = "Dockerfile.torchx_ext"
WORKSPACE_FORMS = "a directory path or file://DIR (--workspace '' runs the image as it is)"
_CHUNK = 1 << 20
_Rule = tuple[bool, str, re.Pattern[str]]  # (exception, literal prefix, pattern)


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
    # Path("") is the current directory: an empty name is a mistake, not a request for it.
    if not text or not path.is_dir():
        raise InvalidArgumentError(f"workspace {workspace!r} is not a directory: give {WORKSPACE_FORMS}")
    return path.resolve()


def workspace_files(root: Path) -> list[str]:
    """The files (and symlinks) that go into the image, as sorted relative POSIX paths."""
    rules = _ignore_rules(root)
    found, pending = [], [""]
    while pending:
        prefix = pending.pop()
        with os.scandir(root / prefix) as entries:
            for entry in entries:
                relative = f"{prefix}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if not _skip_dir(relative, rules):
                        pending.append(f"{relative}/")
                # Sockets and FIFOs are left out: reading a FIFO for the hash would block.
                elif (entry.is_file(follow_symlinks=False) or entry.is_symlink()) and not _ignored(relative, rules):
                    found.append(relative)
    return sorted(found)


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
    labels = {LABEL_WORKSPACE: str(root), LABEL_DIGEST: digest, LABEL_BASE: base_id}
    # The SDK's labels= makes one LABEL step, so one layer commit, per label (0.7 s each on the
    # test engine's vfs storage); the generated Dockerfile sets them in one step instead, unless
    # a value holds characters that Dockerfile quoting would change.
    inline = _dockerfile_name(files) == GENERATED_DOCKERFILE and all(
        re.fullmatch(r"[\w./:@+=,-]*", value) for value in labels.values())
    label_line = "LABEL " + " ".join(f'{key}="{value}"' for key, value in labels.items()) if inline else ""
    with build_context(root, f"FROM {base_id}\nCOPY . .\n{label_line}\n", files) as context:
        try:
            # pull=False: the engine may have no network, and the base is local by its id.
            # IMAGE is the build argument torchx's own Dockerfile.torchx convention expects.
            image, _ = client.images.build(
                fileobj=context, custom_context=True, dockerfile=_dockerfile_name(files), tag=tag, rm=True,
                pull=False, buildargs={"IMAGE": base_id}, labels=None if inline else labels,
            )
        except docker.errors.BuildError as error:
            tail = [str(entry.get("stream", entry.get("error", ""))).strip() for entry in error.build_log][-5:]
            raise InvalidArgumentError(
                f"building workspace {str(root)!r} on {base_image!r} failed: {error.msg} "
                f"({' | '.join(line for line in tail if line)})"
            ) from None
    _prune(client, root, keep, image.id)
    return WorkspaceImage(tag, digest, True, time.monotonic() - started)


def _prune(client: Any, root: Path, keep: int, built_id: str) -> None:
    import docker.errors

    images = client.images.list(filters={"label": f"{LABEL_WORKSPACE}={root}"})
    # The image just built stays whatever the clock says; the others newest first.
    images.sort(key=lambda image: (image.id == built_id, _created_ns(image)), reverse=True)
    for image in images[keep:]:
        try:
            client.images.remove(image.id, noprune=False)
        except docker.errors.APIError:
            pass  # still used by a job's containers (kept until `torchx delete`): next time


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


def _ignore_rules(root: Path) -> list[_Rule]:
    rules = []
    for name in IGNORE_FILES:
        try:
            text = (root / name).read_text(encoding="utf-8-sig")
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("#"):  # as Docker: only at the very start of a line
                continue
            pattern = line.strip()
            exception = pattern.startswith("!")
            pattern = pattern[1:].strip() if exception else pattern
            pattern = os.path.normpath(pattern).lstrip("/") if pattern else ""
            if pattern in ("", "."):
                continue
            try:
                rules.append((exception, *_compile(pattern)))
            except re.error as error:
                raise InvalidArgumentError(f"bad pattern {line.strip()!r} in {root / name}: {error}") from None
    return rules


def _compile(pattern: str) -> tuple[str, re.Pattern[str]]:
    """Docker's regex for ``pattern``, and the literal text that every match starts with."""
    out: list[str] = []
    index = 0
    special = re.search(r"[*?[\\]", pattern)
    literal = pattern if special is None else pattern[: special.start()]
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*" and pattern.startswith("*", index):
            slash = pattern.startswith("*/", index)
            index += 2 if slash else 1
            # `**` at the end takes everything, `**/` any whole segments (or none). A leading
            # `**x` with nothing special after it is a plain suffix match in Docker (".*x");
            # elsewhere Docker spans whole segments there too.
            suffix = not out and not re.search(r"[*?[\\]", pattern[index:])
            out.append(".*" if index >= len(pattern) or suffix and not slash else "(?:.*/)?")
        elif char in "*?":
            out.append("[^/]*" if char == "*" else "[^/]")
        elif char in "[]^-":
            out.append(char)  # classes ([a-z], [^a]) pass through to the regex, as in Docker
        elif char == "\\" and index < len(pattern):
            out.append(re.escape(pattern[index]))
            index += 1
        else:
            out.append(re.escape(char))
    return literal, re.compile("".join(out))


def _ignored(relative: str, rules: list[_Rule]) -> bool:
    # A path is matched as itself and as each of its parent directories.
    parts = relative.split("/")
    candidates = ["/".join(parts[: end + 1]) for end in range(len(parts))]
    excluded = False
    for exception, _, pattern in rules:
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            excluded = not exception
    return excluded


def _skip_dir(relative: str, rules: list[_Rule]) -> bool:
    # An excluded directory is not walked unless an exception could match below it: its
    # matches all start with its literal prefix, which must then agree with "relative/".
    if not _ignored(relative, rules):
        return False
    below = f"{relative}/"
    return not any(exception and (below.startswith(literal) or literal.startswith(below))
                   for exception, literal, _ in rules)


def _dockerfile_name(files: list[str]) -> str:
    return USER_DOCKERFILE if USER_DOCKERFILE in files else GENERATED_DOCKERFILE


def _add_text(archive: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))

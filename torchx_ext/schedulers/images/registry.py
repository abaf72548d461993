"""Publishing a workspace image to a registry, to be named by digest (``REPO@sha256:...``).

A tag can be moved by a later push; a digest cannot. So a job's pods name the digest the push
returned, and a pod started again later (rescheduled, its image evicted) runs the same code.

An image pushed before is not pushed again: the engine keeps the digest of every push of an image
(``RepoDigests``), and one manifest request to the registry confirms it still has it. Whatever
else (registry down, push refused) is one ``EngineError`` naming the registry and the engine's
reason.
"""

from __future__ import annotations

import re
from typing import Any

from torchx_ext.errors import EngineError, InvalidArgumentError
from torchx_ext.schedulers.images.client import explanation
from torchx_ext.schedulers.images.progress import PushProgress, StatusLine, event_error

REPOSITORY_FORMS = "REGISTRY/REPO, e.g. 127.0.0.1:5000/team/train or ghcr.io/org/train"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# A first part is a registry host only with a dot, a port or as localhost (Docker's rule); else it is
# a path component, lower-case like the others.
_HOST = r"(?:localhost|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+|:\d+)|[A-Za-z0-9.-]+:\d+)"
_REPOSITORY = re.compile(rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*")


def registry_of(repository: str) -> str:
    """The registry a repository names, as Docker reads it (no host part: Docker Hub)."""
    first, slash, _ = repository.partition("/")
    return first if slash and ("." in first or ":" in first or first == "localhost") else "docker.io"


def check_repository(repository: str) -> None:
    """An ``image_repo`` that names a repository as Docker's reference grammar has it, with no tag
    or digest (ours is added)."""
    if not _REPOSITORY.fullmatch(repository):
        raise InvalidArgumentError(f"invalid image_repo {repository!r}: expected a repository without tag or digest "
                                   f"(lower-case path components), {REPOSITORY_FORMS}")


def publish(client: Any, image: str, repository: str, tag: str, progress: StatusLine) -> str:
    """``image`` (a local name or id) in ``repository`` as ``REPO@sha256:...``, pushed unless the
    registry has it already."""
    import docker.errors
    import requests.exceptions

    known = _pushed_digest(client, image, repository)
    if known is not None:
        reference = f"{repository}@{known}"
        try:
            client.api.inspect_distribution(reference)
            progress.show(f"{reference} is in the registry already: not pushed")
            progress.close()
            return reference
        except docker.errors.APIError:
            pass  # gone from the registry (or it cannot say): pushed again, which reports why not
    try:
        client.api.tag(image, repository, tag)
        events = client.api.push(repository, tag, stream=True, decode=True)
        pushing = PushProgress(repository)
        for event in events:
            error = event_error(event)
            if error is not None:
                raise _push_error(repository, error)
            said = pushing.read(event)
            if said is not None:
                progress.show(*said)
    except docker.errors.APIError as error:
        raise _push_error(repository, explanation(error)) from None
    except (requests.exceptions.ConnectionError, ConnectionError) as error:
        raise EngineError(f"the Docker engine at {client.api.base_url} stopped answering while pushing to "
                          f"{repository} ({error})") from None
    finally:
        progress.close()
    if pushing.digest is None:
        raise _push_error(repository, "the engine reported no digest for the push")
    return f"{repository}@{pushing.digest}"


def _pushed_digest(client: Any, image: str, repository: str) -> str | None:
    import docker.errors

    try:
        digests = client.images.get(image).attrs.get("RepoDigests") or []
    except docker.errors.APIError:
        return None
    wanted = familiar(repository)
    return next((digest for entry in digests for name, _, digest in [entry.partition("@")]
                 if familiar(name) == wanted), None)


def familiar(repository: str) -> str:
    """A repository as the engine names it back (Docker Hub's without ``docker.io/`` and ``library/``)."""
    for prefix in ("docker.io/", "index.docker.io/"):
        repository = repository.removeprefix(prefix)
    return repository.removeprefix("library/")


def _push_error(repository: str, reason: str) -> EngineError:
    reason = " ".join(reason.split())
    return EngineError(
        f"pushing the workspace image to registry {registry_of(repository)} failed ({reason}): check that it "
        f"answers and takes pushes to {repository} (`docker login {registry_of(repository)}`), or run without "
        "a workspace: --workspace ''")

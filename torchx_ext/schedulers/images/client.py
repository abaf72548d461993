"""The Docker engine's client, as image building and pushing need it (local_docker's jobs and
kubernetes' workspaces): connecting, and an engine's errors said as one line naming the engine
and what to do. Works with Docker and with Podman's Docker-compatible API.
"""

from __future__ import annotations

import os
from typing import Any

from torchx_ext.errors import EngineError

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
START_HINT = (
    "start one (Docker: `sudo systemctl start docker` or `sudo dockerd &`; Podman: "
    "`systemctl --user start podman.socket` and DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock), "
    "or point DOCKER_HOST at a running engine"
)


def connect_client() -> tuple[Any, str, bool]:
    """A ``docker.DockerClient`` for the engine ``DOCKER_HOST`` (and the SDK's other DOCKER_*
    variables) name, answering, with that engine's address and whether it is Podman; else an
    EngineError naming what was tried and how to start one."""
    try:
        import docker
    except ImportError:
        raise EngineError("local_docker and kubernetes workspaces need the docker SDK: pip install docker") from None
    host = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    try:
        client = docker.from_env()
        version = client.version()
    except Exception as error:  # the SDK raises DockerException, requests' and OS errors here
        reason = explanation(error)
        raise EngineError(f"no Docker engine answers at {host} ({reason}): {START_HINT}") from None
    components = " ".join(str(part.get("Name", "")) for part in version.get("Components") or [])
    return client, host, "podman" in components.lower()


def engine_call(call: Any, host: str, what: str) -> Any:
    """``call()``, an engine error (``what`` it was asked to do) or a lost connection said as one
    EngineError naming the engine at ``host``."""
    import docker.errors
    import requests.exceptions

    try:
        return call()
    except docker.errors.APIError as error:
        raise EngineError(f"the engine at {host} could not {what}: {explanation(error)}") from None
    except (requests.exceptions.ConnectionError, ConnectionError) as error:
        raise EngineError(f"the Docker engine at {host} stopped answering ({error}): {START_HINT}") from None


def explanation(error: Any) -> str:
    explanation = getattr(error, "explanation", None)
    text = str(explanation if explanation else error)
    return text.strip().splitlines()[-1] if text.strip() else type(error).__name__

"""The warm interpreter's protocol, both sides: 4 bytes of length, then a JSON object, with
descriptors passed alongside (SCM_RIGHTS); a request's job state; a connection checked to be
served by this user. Standard library only; imported by the server, its clients and the
guardians of attached launchers alike."""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAX_REQUEST = 16 << 20
CONNECT_TIMEOUT_S = 2.0
ANSWER_TIMEOUT_S = 30.0
"""A fork takes milliseconds; an interpreter that took this long is not to be waited for."""


def run_request(module: str, args: list[str], cwd: str, env: Mapping[str, str]) -> dict[str, Any]:
    """What a fork needs to run ``python -m module *args`` as this process would start it: with its
    umask, rlimits and CPUs, and the given ``cwd`` and ``env``."""
    import resource

    umask = os.umask(0o077)
    os.umask(umask)
    rlimits = {kind: resource.getrlimit(kind) for name in dir(resource)
               if name.startswith("RLIMIT_") and (kind := getattr(resource, name)) >= 0}
    return {"module": module, "args": args, "cwd": cwd, "env": dict(env), "umask": umask, "rlimits": rlimits,
            "cpus": sorted(os.sched_getaffinity(0))}


def job_state(request: dict[str, Any]) -> dict[str, Any]:
    """The state a forked process takes from a run or attach request (``fork.run_module_in_fork``)."""
    return {"cwd": request["cwd"], "env": request["env"], "umask": int(request["umask"]),
            "cpus": set(request["cpus"]) if request.get("cpus") else None,
            "rlimits": {int(kind): (soft, hard) for kind, (soft, hard) in request.get("rlimits", {}).items()}}


def send(connection: socket.socket, message: dict[str, Any], descriptors: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    data = struct.pack("!I", len(data)) + data
    if descriptors:
        sent = socket.send_fds(connection, [data], descriptors)
        data = data[sent:]
    connection.sendall(data)


def receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    # The length first, alone: an attached connection carries several messages, one read must
    # not take the next one's bytes.
    data, descriptors, _, _ = socket.recv_fds(connection, 4, 8)
    try:
        return _rest(connection, data), list(descriptors)
    except BaseException:
        for descriptor in descriptors:
            os.close(descriptor)
        raise


def _rest(connection: socket.socket, data: bytes) -> dict[str, Any]:
    while len(data) < 4:
        more = connection.recv(4 - len(data))
        if not more:
            raise ValueError("the connection closed before a request")
        data += more
    (length,) = struct.unpack("!I", data[:4])
    if length > MAX_REQUEST:
        raise ValueError(f"a request of {length} bytes")
    body = data[4:]
    while len(body) < length:
        more = connection.recv(min(1 << 20, length - len(body)))
        if not more:
            raise ValueError("the connection closed mid-request")
        body += more
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("a request that is not a JSON object")
    return message


def connect(path: Path) -> socket.socket:
    """A connection to the warm interpreter at ``path``, once it is known to be served by this
    user: our environment and streams go to no one else."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(CONNECT_TIMEOUT_S)
        connection.connect(str(path))
        credentials = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
        if int(credentials[1]) != os.getuid():
            raise ConnectionRefusedError(f"{path} is served by uid {credentials[1]}, not by you")
        connection.settimeout(ANSWER_TIMEOUT_S)
    except BaseException:
        connection.close()
        raise
    return connection


def exchange(connection: socket.socket, request: dict[str, Any], descriptors: list[int] | None = None) -> dict[str, Any]:
    """The answer to ``request``; a ValueError when it is an error."""
    send(connection, request, descriptors)
    answer, received = receive(connection)
    for descriptor in received:
        os.close(descriptor)
    if "error" in answer:
        raise ValueError(str(answer["error"]))
    return answer

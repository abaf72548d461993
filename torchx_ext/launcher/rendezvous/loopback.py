"""A job whose rendezvous endpoint is a loopback address runs on this host alone: nothing of it
then listens beyond loopback.

torch's rendezvous store has no authentication, and a TCPStore server listens on every interface
whatever host name it is given: a local_cwd job's store was reachable from the whole network.
For such a job the launcher serves its stores (the agents', the workers') on a socket bound to
127.0.0.1, handed to TCPStore as ``master_listen_fd``, and its workers' gloo and NCCL use the
loopback interface (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME=lo``, unless you set them).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import timedelta
from typing import Any

LOOPBACK_ADDRESS = "127.0.0.1"
LOOPBACK_INTERFACE = "lo"
SOCKET_INTERFACE_ENVS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
LISTEN_BACKLOG = 4096
"""As many as 2,048 launchers connect at once (open_files.py)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 possibly in brackets) names this host's loopback."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost") or name == "localhost.localdomain":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def endpoint_is_loopback(endpoint: str) -> bool:
    """Whether a rendezvous endpoint (``HOST``, ``HOST:PORT``, ``[V6]:PORT``) is on loopback."""
    host = endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 or endpoint.startswith("[") else endpoint
    return bool(host) and is_loopback(host)


def keep_sockets_on_loopback() -> None:
    """The workers' gloo and NCCL listen on the loopback interface (a value you set wins)."""
    for name in SOCKET_INTERFACE_ENVS:
        os.environ.setdefault(name, LOOPBACK_INTERFACE)


def serve_store(port: int, timeout_s: float, *, multi_tenant: bool = True) -> Any:
    """A TCPStore server on 127.0.0.1:``port`` (0: a free one) only. OSError when the port is taken."""
    from torch.distributed import TCPStore

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK_ADDRESS, port))
        listener.listen(LISTEN_BACKLOG)
    except OSError:
        listener.close()
        raise
    bound = listener.getsockname()[1]
    # The store owns the descriptor from here on and closes it when it is deleted.
    return TCPStore(LOOPBACK_ADDRESS, bound, is_master=True, wait_for_workers=False, multi_tenant=multi_tenant,
                    timeout=timedelta(seconds=timeout_s), master_listen_fd=listener.detach())


def loopback_agents_store(params: Any) -> Any | None:
    """The agents' store this node serves on loopback, for torch's c10d ``params`` whose endpoint is
    loopback and which this node hosts (``is_host``, or unsaid and the port still free: as torch,
    the first local launcher hosts); None where torch's c10d backend is to make it."""
    from torch.distributed.elastic.rendezvous import RendezvousConnectionError
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    if str(params.get("store_type", "tcp")).lower() != "tcp":
        return None
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=29400)
    is_host = params.get_as_bool("is_host")
    if not is_loopback(host) or is_host is False:
        return None
    try:
        return serve_store(port, params.get_as_int("read_timeout", 60))
    except OSError as error:
        if is_host:
            raise RendezvousConnectionError(f"cannot serve the rendezvous store on {LOOPBACK_ADDRESS}:{port}: "
                                            f"{error.strerror or error}") from error
        return None  # another launcher of this host serves it

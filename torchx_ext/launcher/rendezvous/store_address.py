"""The rendezvous store's address, looked up once: no later connection to the store asks a resolver.

Each round the peer watchdog, the hang watch and the rendezvous' keep-alive open connections of
their own to the store (a TCPStore client holds its one connection while it waits for a key), and
``TCPStore.clone()`` resolves the store host's name again for each. A resolver that drops an answer
(a stalled Docker engine serves its containers' DNS; CoreDNS under load) then failed the beat of a
node nothing had happened to, and its peers counted it lost. The store's address cannot change
while the launcher's own connection to it lives (a TCPStore client never reconnects), so the
launcher makes that connection to an address, the name resolved once as it starts, and every clone
of it, ours or torch's, connects there.

What torch decides from the name is still decided from the name: whether this launcher hosts the
store (``is_host``, torch's guess from the host's names and addresses when it is not given). A
launcher that hosts the store reaches it on loopback (a TCPStore server listens on every interface,
ours on 127.0.0.1 only). A name that does not resolve as the launcher starts, or that resolves to
several addresses none of which answers yet, is kept: torch's client tries them all, as before.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable
from typing import Any

from torchx_ext.launcher.rendezvous.loopback import LOOPBACK_ADDRESS, is_loopback

logger = logging.getLogger("torchx_ext.launcher")

C10D_DEFAULT_PORT = 29400
"""torch's c10d backend's port where an endpoint gives none."""
PROBE_S = 1.0
"""How long one of several addresses has to accept a connection to be chosen."""


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def chosen_address(host: str, hosts_store: bool, addresses: list[str], answers: Callable[[str], bool]) -> str | None:
    """The address to reach the store at, for its ``host`` (a name or an address) as the endpoint
    gives it; None keeps ``host``. ``hosts_store``: this launcher serves the store; ``addresses``:
    what ``host`` resolved to, in the resolver's order (none: it did not resolve); ``answers``: whether
    a connection to an address opens (asked only where there are several)."""
    if is_address(host):
        return None
    if hosts_store or is_loopback(host):
        return LOOPBACK_ADDRESS
    distinct = list(dict.fromkeys(addresses))
    if len(distinct) == 1:
        return distinct[0]
    return next((address for address in distinct if answers(address)), None)


def endpoint_at(endpoint: str, address: str | None) -> str:
    """``endpoint`` (``HOST[:PORT]``) with its host replaced by ``address`` (unchanged for None)."""
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    if address is None:
        return endpoint
    _, port = parse_rendezvous_endpoint(endpoint, default_port=C10D_DEFAULT_PORT)
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _resolved(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        logger.debug("the rendezvous store's host %r does not resolve now (%s): kept as a name", host, error)
        return []
    return [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]


def _answers(port: int) -> Callable[[str], bool]:
    def answers(address: str) -> bool:
        try:
            with socket.create_connection((address, port), timeout=PROBE_S):
                return True
        except OSError:
            return False

    return answers


def with_store_address(params: Any) -> Any:
    """torch's c10d rendezvous ``params`` whose TCP store is reached at an address rather than a name
    (the same ``params`` where there is nothing to change): for making the launcher's store only. The
    endpoint's other readers (is it loopback, the lines that name it) keep the original."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    if str(params.get("store_type", "tcp")).lower() != "tcp":
        return params
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=C10D_DEFAULT_PORT)
    if is_address(host):
        return params
    hosts_store = params.get_as_bool("is_host")
    if hosts_store is None:
        try:  # torch's own guess, from the name: the address must not change it
            from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname
        except ImportError:  # a torch without it: leave the name, and the guess, to torch
            return params
        hosts_store = bool(_matches_machine_hostname(host))
    address = chosen_address(host, hosts_store, [] if hosts_store else _resolved(host, port), _answers(port))
    if address is None:
        return params
    logger.debug("the rendezvous store %s is reached at %s from here on", params.endpoint, address)
    return RendezvousParameters(params.backend, endpoint_at(params.endpoint, address), params.run_id,
                                params.min_nodes, params.max_nodes, params.local_addr, **params.config)

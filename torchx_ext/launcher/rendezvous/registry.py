"""The watched c10d backend in torch's registry of rendezvous backends (``BACKEND``): torch's
``launch_agent`` asks the registry for a handler by the config's backend name, and ``create_handler``
builds it from the keys ``config.watch_rendezvous`` wrote into ``--rdzv-conf``: the inner c10d
handler (the arrival rendezvous, or torch's own) over the store torch's c10d backend would make,
wrapped in the watched handler (``watched.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from torchx_ext.launcher.hang_watch import registered
from torchx_ext.launcher.rendezvous.arrival_handler import arrival_handler
from torchx_ext.launcher.rendezvous.loopback import LOOPBACK_ADDRESS, endpoint_is_loopback, loopback_agents_store
from torchx_ext.launcher.rendezvous.ranks import torch_round
from torchx_ext.launcher.rendezvous.settings import (BACKEND, HANDLER_KEY, NODE_RANK_KEY, RESTARTS_KEY, SPARES_KEY,
                                                        TIMEOUT_KEY, TIMEOUTS)
from torchx_ext.launcher.rendezvous.store_address import with_store_address
from torchx_ext.launcher.rendezvous.store_keys import delete_keys
from torchx_ext.launcher.rendezvous.watchdog import Loss

_store_loss_handler: list[Callable[[Loss], None]] = []


def register_backend(on_store_loss: Callable[[Loss], None]) -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    _store_loss_handler[:] = [on_store_loss]
    rendezvous_handler_registry.register(BACKEND, create_handler)  # the same creator again is a no-op


def create_handler(params: Any) -> Any:
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    config = dict(params.config)
    timeout = float(config.pop(TIMEOUT_KEY))
    restarts = int(config.pop(RESTARTS_KEY))
    node_rank = int(config.pop(NODE_RANK_KEY))
    spares = int(config.pop(SPARES_KEY))
    kind = config.pop(HANDLER_KEY)
    c10d = RendezvousParameters(
        backend="c10d",
        endpoint=params.endpoint,
        run_id=params.run_id,
        min_nodes=params.min_nodes,
        max_nodes=params.max_nodes,
        local_addr=params.local_addr,
        **config,
    )
    # A job on this host alone: its store on loopback (loopback.py). torch's handler tells the workers
    # its --local-addr (else the host's name) as the store's address: 127.0.0.1 when none is given.
    local = loopback_agents_store(c10d) if kind != "torch" or params.local_addr is None else None
    forget: Callable[[], None] | None = None
    if kind == "torch":
        if local is not None:
            c10d.local_addr = LOOPBACK_ADDRESS
        else:
            from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

            _, local = create_backend(with_store_address(c10d))  # as torch's registry does for c10d
        inner = _torch_handler(local, c10d)
        forget = _old_torch_rounds_forgetter(inner, local, params.run_id)
    else:
        inner = _arrivals(c10d, node_rank, local)  # it deletes old rounds itself
    from torchx_ext.launcher.rendezvous.watched import watched_handler  # imports torch's handler class

    return watched_handler(inner, timeout_s=timeout, restarts=restarts, endpoint=params.endpoint,
                           on_store_loss=_store_loss_handler[0], node_rank=node_rank, local_addr=params.local_addr,
                           spares=spares, max_nodes=params.max_nodes, forget_old_rounds=forget, progress=registered())


def _torch_handler(store: Any, params: Any) -> Any:
    """torch's c10d handler over ``store``, as torch's registry builds it over the store it makes."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    return create_handler(store, C10dRendezvousBackend(store, params.run_id), params)


def _old_torch_rounds_forgetter(inner: Any, store: Any, run_id: str) -> Callable[[], None]:
    """Deletes the keys of torch's handler's rounds before the one before its current round: its
    round stores (``torch.rendezvous.<run>.<round>/``: the agents' and the watchdog's keys), which
    torch never deletes. Its own state is one key, rewritten."""
    pattern = re.compile(rf"^torch\.rendezvous\.{re.escape(run_id)}\.(\d+)/")

    def forget() -> None:
        current = torch_round(inner)
        if current is None:
            return  # a torch whose internals differ
        def old(key: str) -> bool:
            match = pattern.match(key)
            return match is not None and int(match.group(1)) < current - 1

        delete_keys(store, old)

    return forget


def _arrivals(params: Any, node_rank: int, store: Any | None) -> Any:
    """The arrival rendezvous over ``store``, else the store torch's c10d backend makes of
    ``params`` (reached at an address: store_address.py), with torch's settings of ``TIMEOUTS`` and their defaults."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    given = {key: params.get_as_int(key, default) for key, default in TIMEOUTS}
    if store is None:
        _, store = create_backend(with_store_address(params))
    return arrival_handler(store, params.run_id, params.min_nodes, params.max_nodes,
                           loopback=endpoint_is_loopback(params.endpoint),
                           join_timeout_s=given["join_timeout"], last_call_s=given["last_call_timeout"],
                           node_rank=node_rank, local_addr=params.local_addr,
                           keep_alive_s=given["keep_alive_interval"], keep_alive_misses=given["keep_alive_max_attempt"])

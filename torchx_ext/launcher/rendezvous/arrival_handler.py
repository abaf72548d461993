"""torch's ``RendezvousHandler`` interface over the arrival rendezvous (``arrivals.py``),
as the launcher's c10d runs it."""

from __future__ import annotations

import logging
import os
from typing import Any

from torchx_ext.launcher.rendezvous.arrivals import BACKEND, KEEP_ALIVE_MISSES, KEEP_ALIVE_S, ArrivalRendezvous
from torchx_ext.launcher.rendezvous.store_keys import delete_keys

logger = logging.getLogger(__name__)


def arrival_handler(store: Any, run_id: str, min_nodes: int, max_nodes: int, *, join_timeout_s: float = 600,
                    last_call_s: float = 30, node_rank: int = -1, local_addr: str | None = None,
                    keep_alive_s: float = KEEP_ALIVE_S, keep_alive_misses: int = KEEP_ALIVE_MISSES,
                    loopback: bool = False) -> Any:
    """torch's ``RendezvousHandler`` over ``ArrivalRendezvous`` (the store: this node's client).
    Rank 0's launcher serves its workers' store: on 127.0.0.1 only for a job on this host alone
    (``loopback``), and a new one each round where torch's switch asks for a fresh store per
    attempt (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, worker_store.py), which torch would
    leave to rank 0's worker to serve on every interface. A workers' store served again in a later
    round is emptied first: the store stays bounded whatever the restarts."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

    from torchx_ext.launcher.rendezvous.loopback import LOOPBACK_ADDRESS, serve_store

    rendezvous = ArrivalRendezvous(store, run_id, min_nodes, max_nodes, join_timeout_s=join_timeout_s,
                                   last_call_s=last_call_s, node_rank=node_rank, local_addr=local_addr,
                                   keep_alive_s=keep_alive_s, keep_alive_misses=keep_alive_misses)

    class ArrivalRendezvousHandler(RendezvousHandler):  # type: ignore[misc]  # torch is untyped here
        def __init__(self) -> None:
            self.rendezvous = rendezvous
            self._workers_store: Any = None  # rank 0's, when the agents' store is shared

        def get_backend(self) -> str:
            return BACKEND

        @property
        def use_agent_store(self) -> bool:
            return True  # the workers connect to the store rank 0's launcher serves them

        def next_rendezvous(self) -> Any:
            round_, rank, size = rendezvous.join()
            store = rendezvous.round_store(round_)
            addr = LOOPBACK_ADDRESS if loopback else rendezvous.node.addr
            fresh = os.getenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0") == "1"  # torch's switch
            if rank != 0 or fresh:
                self._workers_store = None  # the previous round's workers are stopped
            # Published in every round (torch publishes it in the first only, and a node ranked
            # after it in a later round waits).
            if rank == 0 and self._workers_store is None:
                self._workers_store = (serve_store(0, 300) if loopback else
                                       TCPStore(host_name=addr, port=0, is_master=True, multi_tenant=True))
            elif rank == 0:
                # The last round's workers are stopped: what they wrote (their process groups' keys,
                # the user's own) is nobody's now, and would pile up over restarts.
                delete_keys(self._workers_store, lambda key: True)
            port = self._workers_store.port if rank == 0 else None
            return RendezvousInfo(store, rank, size, RendezvousStoreInfo.build(rank, store, local_addr=addr,
                                                                               server_port=port))

        def is_closed(self) -> bool:
            return rendezvous.is_closed()

        def set_closed(self) -> None:
            rendezvous.set_closed()

        def num_nodes_waiting(self) -> int:
            return rendezvous.num_nodes_waiting()

        def first_round_formed(self) -> bool:  # for spare.py
            return rendezvous.first_round_formed()

        def waiting_as_spare(self) -> bool:  # for spare.py
            return rendezvous.spare

        @property
        def ranks_by_node_rank(self) -> bool:  # the watched handler need not reorder
            return True

        def get_run_id(self) -> str:
            return run_id

        def shutdown(self) -> bool:
            # As torch's handler: the store's host may have ended first (its launcher exits once its
            # own workers are done), and then closing fails without failing this node.
            try:
                rendezvous.set_closed()
            except RuntimeError as error:  # torch's store errors (DistError)
                logger.warning("could not close the rendezvous %r, its store is gone: %s", run_id,
                               str(error).splitlines()[0] if str(error) else type(error).__name__)
                return False
            return True

    return ArrivalRendezvousHandler()

"""Group ranks by node rank on torch's c10d handler: survivors keep theirs, a spare takes its lost
node's (the arrival rendezvous ranks so itself)."""

from __future__ import annotations

from typing import Any

NODE_RANK_PREFIX = "torchx_ext.node_rank."


def torch_round(handler: Any) -> int | None:
    """The round torch's c10d handler is in (None: a torch whose internals differ)."""
    current = getattr(getattr(getattr(handler, "_state_holder", None), "state", None), "round", None)
    return current if isinstance(current, int) else None


def in_node_rank_order(info: Any, node_rank: int, local_addr: str | None, shared_store: bool,
                       kept: int | None = None) -> Any:
    """``info`` (torch's RendezvousInfo) with this node's rank chosen as the arrival rendezvous
    chooses (``rendezvous_core.assign_ranks``): ``kept``, its rank in the round just before, when it
    was a member there; the other nodes fill the free ranks by ``--node-rank`` when every node gave
    a distinct one, else in torch's order (by host name or --local-addr, then pid). So survivors
    keep their ranks, and a hot spare (``spare.py``, node rank N or above) that replaced node k
    takes k's.

    torch's c10d ranks agents by host name, so replica k of a scheduler need not run group rank
    k: the first replica's log is then not rank 0's, nor rank r on the node a user expects. Every
    node publishes its claim in the round's store and reads all of them: all take the same choice.
    With the agents' store shared (``shared_store``), the workers find it where torch's rank 0
    serves it, whatever the ranks. Without (``--max-restarts``: a fresh store per attempt), global
    rank 0's worker serves the workers' store at MASTER_ADDR: that must be the new rank 0's host,
    so it is published again, by the new rank 0 (under keys of our own: torch's rank 0 has
    published its own already)."""
    import json

    from torch.distributed import PrefixStore
    from torch.distributed.elastic.rendezvous import RendezvousInfo
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

    from torchx_ext.launcher.rendezvous.core import RankClaim, assign_ranks

    if not 0 <= info.rank < info.world_size:
        return info  # torch's handler under clock skew can say so (docs/launcher.md): nothing to reorder
    store = info.store
    store.set(f"{NODE_RANK_PREFIX}{info.rank}", json.dumps([node_rank, -1 if kept is None else kept]))
    claims = []
    for torch_rank, value in enumerate(store.multi_get([f"{NODE_RANK_PREFIX}{rank}" for rank in range(info.world_size)])):
        given, was = json.loads(value)
        claims.append(RankClaim(None if was < 0 else int(was), int(given), (torch_rank,)))
    rank = assign_ranks(claims)[info.rank]
    if rank == info.rank:
        return info
    bootstrap = info.bootstrap_store_info
    if not shared_store:
        bootstrap = RendezvousStoreInfo.build(rank, PrefixStore("torchx_ext.bootstrap/", store), local_addr=local_addr)
    return RendezvousInfo(store, rank, info.world_size, bootstrap)

"""torch's c10d rendezvous without its fixed pauses on the way to a round.

torch's dynamic rendezvous pauses twice while nodes gather: a random 0 to 0.3 s before a node's
first join (to spread many nodes' first writes to the store), and 1 s between two reads of the
rendezvous' state while it waits for other nodes (to keep the store's load down). For a job of a
few nodes both are only start-up time: the first node to join learns up to 1 s late that the last
one did, and every node waits for it. While our handler's ``next_rendezvous`` runs, they become:

- no spread up to ``SPREAD_FROM_NODES`` nodes;
- a wait that ends as soon as the rendezvous' state in the store changes, never longer than
  torch's. The state is read every ``max(MIN_READ_S, READ_PER_NODE_S * max_nodes)``, so all the
  waiting nodes together read it about 200 times a second at most, whatever the job's size.

torch also keeps a read of the state for a second (its state holder's ``cache_duration``): that
too is off while the block runs, as the pauses pace the reads. torch's pause is swapped in this
process only (``dynamic_rendezvous._delay``, a module global of torch 2.x); outside our handler,
or with a torch whose internals differ, torch's own runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

SPREAD_FROM_NODES = 16
MIN_READ_S = 0.05
READ_PER_NODE_S = 0.005
_waiting = threading.local()


@dataclass(frozen=True)
class _Rendezvous:
    read_state: Callable[[], object]
    max_nodes: int

    def pause(self, seconds: float | tuple[float, float], torchs: Callable[[Any], None]) -> None:
        if isinstance(seconds, tuple):  # the spread before a first join
            if self.max_nodes > SPREAD_FROM_NODES:
                torchs(seconds)
            return
        interval = max(MIN_READ_S, READ_PER_NODE_S * self.max_nodes)
        if interval >= seconds:
            torchs(seconds)
            return
        deadline = time.monotonic() + seconds
        before = self.read_state()
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(interval, left))
            if self.read_state() != before:
                return


@contextmanager
def prompt_pauses(handler: Any) -> Iterator[None]:
    """While the block runs (a ``next_rendezvous`` of torch's c10d ``handler``), its pauses in this
    thread are those of the module's docstring; a handler of another kind keeps torch's."""
    holder: Any = getattr(handler, "_state_holder", None)
    backend = getattr(holder, "_backend", None)
    store, key = getattr(backend, "_store", None), getattr(backend, "_key", None)
    max_nodes = getattr(getattr(handler, "_settings", None), "max_nodes", None)
    cached_s = getattr(holder, "_cache_duration", None)
    if (store is None or not isinstance(key, str) or not isinstance(max_nodes, int) or not isinstance(cached_s, int)
            or not _install()):
        yield
        return

    def read_state() -> object:
        try:
            return store.get(key) if store.check([key]) else None
        except Exception:  # a store that fails here fails torch's next read too, which reports it
            return None

    _waiting.rendezvous = _Rendezvous(read_state, max_nodes)
    holder._cache_duration = 0  # torch's reads are paced by the pauses above
    try:
        yield
    finally:
        _waiting.rendezvous = None
        holder._cache_duration = cached_s


def _install() -> bool:
    try:
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    except ImportError:
        return False
    torchs = getattr(dynamic_rendezvous, "_delay", None)
    if not callable(torchs):
        return False
    if getattr(torchs, "torchx_ext_prompt", False):
        return True

    def pause(seconds: float | tuple[float, float]) -> None:
        rendezvous = getattr(_waiting, "rendezvous", None)
        if rendezvous is None:
            torchs(seconds)
        else:
            rendezvous.pause(seconds, torchs)

    pause.torchx_ext_prompt = True  # type: ignore[attr-defined]
    dynamic_rendezvous._delay = pause
    return True

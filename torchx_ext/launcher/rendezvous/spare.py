"""Hot spares: launchers beyond the rendezvous' node count, waiting to take a lost node's place.

Both c10d rendezvous the launcher runs (the arrival rendezvous, its default, and torch's handler)
keep a node that arrives when a round is full waiting apart (torch's redundancy list): it trains
nothing and counts in no ``num_nodes_waiting`` (so it restarts nobody) until a member's keep-alive
expires. Once a member rendezvouses
again (it left after a failure, or the watchdog declared a peer lost), the spare joins the next
round, with the survivors. So a replica started beyond ``--nnodes`` is a hot spare, with the
rendezvous' own rounds; this module adds what a user and a scheduler need around them:

- a launcher of node rank N or above (N = ``--nnodes``) lets the first round form before it
  joins, so the spares are the last replicas, as a user reading ``--spares`` expects;
- the liveness file says ``spare`` while this launcher waits in the redundancy list, so its
  scheduler can show it as one (``torchx status``);
- a spare whose rendezvous is closed (the job's nodes finished or gave up) leaves with exit 0:
  torch's agent would fail on it (it returns no result from ``run``). So does a launcher of a job
  with spares whose first join finds the rendezvous closed: a replacement that came when the
  job's nodes were done has nothing to replace (torch: RendezvousClosedError, a failure).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torchx_ext.errors import TorchxExtError
from torchx_ext.launcher.liveness import write_state
from torchx_ext.liveness import RUNNING, SPARE

POLL_S = 0.5
FIRST_ROUND_WAIT_S = 30.0
"""How long a launcher of node rank ``--nnodes`` or above lets the others form the first round
before it joins: then it is a spare from the start (replicas 0 to N-1 train, replica 0 included,
which hosts the store on most schedulers), and it still fills the place of one that never came."""


class SpareReleased(TorchxExtError):
    """The rendezvous closed while this launcher waited as a hot spare: nothing left to replace."""


def let_the_first_round_form(handler: Any, limit_s: float = FIRST_ROUND_WAIT_S) -> None:
    """Wait until ``handler`` sees its first round complete (or closed), at most ``limit_s``: the
    arrival rendezvous' (``first_round_formed``) or torch's c10d handler's; at once for another."""
    formed = _first_round_formed(handler)
    if formed is None:
        return
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not formed():
        time.sleep(POLL_S / 5)


def _first_round_formed(handler: Any) -> Callable[[], bool] | None:
    asked = getattr(handler, "first_round_formed", None)
    if callable(asked):
        return lambda: bool(asked())
    holder: Any = getattr(handler, "_state_holder", None)  # torch's c10d handler
    if holder is None or not callable(getattr(holder, "sync", None)):
        return None

    def torchs() -> bool:
        holder.sync()
        state = getattr(holder, "state", None)
        return bool(getattr(state, "complete", True) or getattr(state, "closed", True) or getattr(state, "round", 1) > 0)

    return torchs


def _waiting_as_spare(handler: Any) -> Callable[[], bool] | None:
    asked = getattr(handler, "waiting_as_spare", None)
    if callable(asked):
        return lambda: bool(asked())
    holder: Any = getattr(handler, "_state_holder", None)  # torch's c10d handler
    node: Any = getattr(handler, "_this_node", None)
    if holder is None or node is None:
        return None
    return lambda: node in getattr(getattr(holder, "state", None), "redundancy_list", ())


@contextmanager
def marked_while_spare(handler: Any, liveness_file: str | None, closed_releases: bool = False) -> Iterator[None]:
    """While the block runs (a ``next_rendezvous`` of ``handler``: ours or torch's c10d), ``liveness_file``
    says ``spare`` whenever this node is in the redundancy list, ``running`` otherwise. A closed
    rendezvous that finds this node a spare raises ``SpareReleased``; so does any closed one with
    ``closed_releases`` (a first join, in a job with spares). A handler of another kind, or no
    file: nothing is marked."""
    from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousGracefulExitError

    is_spare = _waiting_as_spare(handler)
    done = threading.Event()
    watcher = None
    if liveness_file and is_spare is not None:

        def mark() -> None:
            spare = False
            while not done.wait(POLL_S):
                now = is_spare()
                if now != spare:
                    spare = now
                    write_state(liveness_file, SPARE if spare else RUNNING)
            if spare:
                write_state(liveness_file, RUNNING)

        watcher = threading.Thread(target=mark, name="torchx_ext: spare mark", daemon=True)
        watcher.start()
    try:
        yield
    except RendezvousGracefulExitError as error:
        raise SpareReleased(f"hot spare released: the rendezvous closed while it waited ({error})") from None
    except RendezvousClosedError:
        if not closed_releases:
            raise
        raise SpareReleased("hot spare released: the rendezvous was closed when it came (the job's nodes are done)") from None
    finally:
        done.set()
        if watcher is not None:
            watcher.join()

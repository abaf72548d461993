"""A c10d-store rendezvous whose join costs each node a constant number of store operations.

torch's c10d handler keeps one state blob (every node, its heartbeat, the lists) that each node
rewrites by compare-and-set: N nodes joining together make on the order of N² attempts of O(N)
bytes each. Here a round is built from keys no node rewrites:

- ``round`` names the round open now; ``r{k}.open`` exists once round k is open (nodes wait on
  it, server-side, instead of polling);
- a node joins round k by ``add(r{k}.arrivals, 1)``: its arrival number ``a``, and writes its
  description (address, pid, ``--node-rank``) under ``r{k}.node.{a}``;
- the node that arrives ``max_nodes``-th seals the round at once; the ``min_nodes``-th seals it
  after the last-call timeout with those arrived by then (torch's MIN:MAX). Sealing is claimed by
  a compare-and-set, so one node seals: it reads the descriptions in one ``multi_get``, gives the
  ranks (by ``--node-rank`` when those are distinct, else as torch orders nodes: by address, then
  pid), writes them in one ``multi_set`` and then ``r{k}.sealed`` (the round's size), on which
  every member waits;
- a node that arrives after the round is full waits for the next round (torch's redundancy list,
  where hot spares wait); one that arrives after it was sealed below ``max_nodes`` also counts in
  ``r{k+1}.waiting``, which is ``num_nodes_waiting``: the members then rendezvous again, as torch's
  agent does for a new node. Waiters take a ticket (``r{k+1}.queue``); once round k+1 opens, each
  lets round k's members and the waiters before it arrive first (at most ``TURN_GRACE_S``);
- a member that rendezvouses again (its workers failed, or the watchdog declared a peer lost)
  opens round k+1; ``closed`` ends every wait (``set_closed``, ``shutdown``).

Each node makes about eight operations to join; the sealer two more whose payload is O(N).

While a node is a member, it adds one to its round's ``r{k}.beats`` every ``keep_alive_s``
(torch's keep-alive interval), on a connection of its own. A node waiting outside a sealed round
(a spare, or a node come after the seal) reads that one counter whenever its wait wakes: when it
has not moved for ``keep_alive_misses`` intervals, every member is gone (all killed, or a whole job
started again against a store that outlived it) and the waiter opens the next round itself. One
member still alive keeps the round; the watchdog tells the survivors of a lost peer. What torch's
handler does that this one does not: it drops a node that joined and then stopped beating its
keep-alive before the round completed (here such a node is in the round, and the watchdog declares
it lost once the round runs).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

BACKEND = "torchx_ext-arrivals"
logger = logging.getLogger(__name__)
NUM_NODES_WAITING_CACHE_S = 1.0
"""The agent asks for waiting nodes every monitor interval: one store read a second at most."""
TURN_GRACE_S = 2.0
"""How long a node waiting for a round lets the round's members and earlier waiters arrive first."""
TURN_POLL_S = 0.1
TURN_STAGGER_S = 0.3
KEEP_ALIVE_S = 5
KEEP_ALIVE_MISSES = 3
"""torch's ``keep_alive_interval`` and ``keep_alive_max_attempt`` defaults: a round none of whose
members has beaten for 3 x 5 s is over."""


@dataclass(frozen=True)
class NodeDescription:
    addr: str
    pid: int
    node_rank: int
    local_id: int

    def to_json(self) -> str:
        return json.dumps([self.addr, self.pid, self.node_rank, self.local_id])

    @staticmethod
    def from_json(text: bytes | str) -> "NodeDescription":
        addr, pid, node_rank, local_id = json.loads(text)
        return NodeDescription(str(addr), int(pid), int(node_rank), int(local_id))


def ranks_of(nodes: list[NodeDescription]) -> list[int]:
    """Each node's rank in its round: by ``--node-rank`` when every node gave a distinct one (a hot
    spare's, N or above, then takes the place of the node it replaced), else by (address, pid, id),
    as torch's c10d handler orders its participants."""
    given = [node.node_rank for node in nodes]
    if min(given) >= 0 and len(set(given)) == len(given):
        order = sorted(range(len(nodes)), key=lambda index: given[index])
    else:
        order = sorted(range(len(nodes)), key=lambda index: (nodes[index].addr, nodes[index].pid, nodes[index].local_id))
    ranks = [0] * len(nodes)
    for rank, index in enumerate(order):
        ranks[index] = rank
    return ranks


_local_ids = iter(range(1 << 62))
_local_ids_lock = threading.Lock()


class ArrivalRendezvous:
    """The rendezvous logic over a c10d ``store`` (each node's own client); torch's handler
    interface is ``arrival_handler``'s."""

    def __init__(self, store: Any, run_id: str, min_nodes: int, max_nodes: int, *, join_timeout_s: float = 600,
                 last_call_s: float = 30, node_rank: int = -1, local_addr: str | None = None,
                 keep_alive_s: float = KEEP_ALIVE_S, keep_alive_misses: int = KEEP_ALIVE_MISSES,
                 turn_grace_s: float = TURN_GRACE_S) -> None:
        from torch.distributed import PrefixStore

        if not 1 <= min_nodes <= max_nodes:
            raise ValueError(f"min_nodes {min_nodes} and max_nodes {max_nodes}: expected 1 <= min <= max")
        self.store = PrefixStore(f"torchx_ext.rdzv/{run_id}/", store)
        self.run_id = run_id
        self.min_nodes, self.max_nodes = min_nodes, max_nodes
        self.join_timeout_s, self.last_call_s = join_timeout_s, last_call_s
        self.keep_alive_s, self.keep_alive_misses = keep_alive_s, keep_alive_misses
        self.turn_grace_s = turn_grace_s
        self._turn: int | None = None
        """A round this node arrives at without waiting its turn (it waited, or was in the round before)."""
        self._beats_stop = threading.Event()
        with _local_ids_lock:
            local_id = next(_local_ids)
        self.node = NodeDescription(local_addr or socket.getfqdn(), os.getpid(), node_rank, local_id)
        self.round: int | None = None
        """The round this node was last a member of."""
        self.spare = False
        """Whether this node now waits because a round was full (torch's redundancy list)."""
        self._waiting_read_at = -NUM_NODES_WAITING_CACHE_S
        self._waiting = 0

    def join(self) -> tuple[int, int, int]:
        """Wait for a round with this node in it: (round, rank, world size). Raises torch's
        RendezvousClosedError, RendezvousGracefulExitError (closed while this node waited as a
        redundant one) or RendezvousTimeoutError."""
        deadline = time.monotonic() + self.join_timeout_s
        self.stop_beating()  # a member that rendezvouses again has left its round
        try:
            joined = self._join(deadline)
        finally:
            self.spare = False
        self._beat(joined[0])
        return joined

    def _join(self, deadline: float) -> tuple[int, int, int]:
        from torch.distributed.elastic.rendezvous import (RendezvousClosedError, RendezvousGracefulExitError,
                                                          RendezvousTimeoutError)

        redundant = False
        while True:
            if self.store.check(["closed"]):
                if redundant:
                    raise RendezvousGracefulExitError(f"the rendezvous {self.run_id!r} is closed")
                raise RendezvousClosedError(f"the rendezvous {self.run_id!r} is closed")
            current = int(self.store.add("round", 0))
            if self.round is not None:
                # A member again: the next round is this node's to open (whoever is first), and
                # its place there comes before the waiting nodes'.
                if self.round >= current:
                    self.store.compare_set("round", str(current), str(current + 1))
                    self.store.set(f"r{current + 1}.open", "")
                self._turn, self.round = self.round + 1, None
                continue
            if self.store.check([f"r{current}.sealed"]):
                redundant = self._wait_outside(current, deadline)
                if redundant:
                    deadline = self._after_spare_wait()
                continue
            if current > 0 and self._turn != current:  # come while the round is open: behind the others
                sealed = self.store.check([f"r{current - 1}.sealed"])
                self._await_turn(current, int(self.store.get(f"r{current - 1}.sealed")) if sealed else 0,
                                 int(self.store.add(f"r{current}.queue", 1)))
            arrival = int(self.store.add(f"r{current}.arrivals", 1))
            if arrival > self.max_nodes:
                redundant = self.spare = True
                self._wait_for_round(current + 1, float("inf"), members=self.max_nodes)
                self.spare = False
                deadline = self._after_spare_wait()
                continue
            self.store.set(f"r{current}.node.{arrival}", self.node.to_json())
            if arrival == self.max_nodes:
                self._seal(self.store, current, self.max_nodes)
            elif arrival == self.min_nodes:
                threading.Thread(target=self._last_call, args=(current,), daemon=True,
                                 name="torchx_ext rendezvous: last call").start()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RendezvousTimeoutError(f"the rendezvous {self.run_id!r} did not complete in time")
            try:
                self.store.wait([f"r{current}.sealed"], timedelta(seconds=left))
            except Exception as error:  # the store's wait timed out (DistStoreError)
                raise RendezvousTimeoutError(
                    f"the rendezvous {self.run_id!r} did not complete in {self.join_timeout_s:g} s: "
                    f"{arrival} of {self.min_nodes}..{self.max_nodes} nodes had arrived") from error
            size = int(self.store.get(f"r{current}.sealed"))
            if arrival > size:  # sealed just before this node arrived
                self.store.add(f"r{current + 1}.waiting", 1)
                self._wait_for_round(current + 1, deadline, members=size)
                continue
            self.round = current
            self._waiting_read_at = -NUM_NODES_WAITING_CACHE_S
            return current, int(self.store.get(f"r{current}.rank.{arrival}")), size

    def num_nodes_waiting(self) -> int:
        """Nodes waiting for a round after this node's (each read at most once a second)."""
        if self.round is None:
            return 0
        now = time.monotonic()
        if now - self._waiting_read_at >= NUM_NODES_WAITING_CACHE_S:
            self._waiting = int(self.store.add(f"r{self.round + 1}.waiting", 0))
            self._waiting_read_at = now
        return self._waiting

    def is_closed(self) -> bool:
        return bool(self.store.check(["closed"]))

    def stop_beating(self) -> None:
        """Stop this member's keep-alive (a new join, the end, or as a frozen node would)."""
        self._beats_stop.set()

    def _beat(self, round_: int) -> None:
        stop = self._beats_stop = threading.Event()

        def beat() -> None:
            try:
                # Its own connection: the agent's waits on this node's client may last minutes.
                store = self.store.clone()
                while not stop.is_set():
                    store.add(f"r{round_}.beats", 1)
                    stop.wait(self.keep_alive_s)
            except Exception:  # the store is gone: the agent's own calls and the watchdog tell
                pass

        threading.Thread(target=beat, daemon=True, name="torchx_ext rendezvous: keep-alive").start()

    def first_round_formed(self) -> bool:
        """Whether a first round was sealed (or the rendezvous closed): a hot spare joins after."""
        return bool(self.store.check(["r0.sealed"]) or self.store.check(["closed"])
                    or int(self.store.add("round", 0)) > 0)

    def set_closed(self) -> None:
        self.stop_beating()
        self.store.set("closed", "")
        current = int(self.store.add("round", 0))
        self.store.set(f"r{current + 1}.open", "")  # wakes the nodes waiting for a round

    def round_store(self, round_: int) -> Any:
        from torch.distributed import PrefixStore

        return PrefixStore(f"r{round_}/", self.store)

    def _wait_outside(self, current: int, deadline: float) -> bool:
        """This node came after round ``current`` was sealed: it waits for the next round, counted
        as waiting if the round has room (its members then rendezvous again). Whether it waited
        as a redundant node."""
        size = int(self.store.get(f"r{current}.sealed"))
        if size < self.max_nodes:
            self.store.add(f"r{current + 1}.waiting", 1)
        self.spare = size >= self.max_nodes
        self._wait_for_round(current + 1, deadline if size < self.max_nodes else float("inf"), members=size)
        redundant, self.spare = self.spare, False
        return redundant

    def _after_spare_wait(self) -> float:
        # A spare may wait for hours: its join timeout counts from when it has a round to join.
        return time.monotonic() + self.join_timeout_s

    def _wait_for_round(self, next_round: int, deadline: float, members: int) -> None:
        """Until round ``next_round`` opens and it is this node's turn to arrive: its ``members``
        (of the round before it) open it, or this node does once every one of them stopped
        beating."""
        from torch.distributed.elastic.rendezvous import RendezvousTimeoutError

        sealed = next_round - 1
        ticket = int(self.store.add(f"r{next_round}.queue", 1))  # the waiters' order
        beats, moved_at = -1, time.monotonic()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RendezvousTimeoutError(f"the rendezvous {self.run_id!r}: no round for this node in time")
            try:
                self.store.wait([f"r{next_round}.open"], timedelta(seconds=min(left, self.keep_alive_s)))
            except Exception:  # timed out: are the round's members still there?
                pass
            else:
                self._await_turn(next_round, members, ticket)
                return
            now, seen = time.monotonic(), int(self.store.add(f"r{sealed}.beats", 0))
            if seen != beats:
                beats, moved_at = seen, now
            elif now - moved_at >= self.keep_alive_s * self.keep_alive_misses:
                self.store.compare_set("round", str(sealed), str(next_round))
                self.store.set(f"r{next_round}.open", "")
                self._await_turn(next_round, 0, ticket)  # no member will come
                return

    def _await_turn(self, round_: int, members: int, ticket: int) -> None:
        """Let the ``members`` of the round before ``round_`` (who come back when they rendezvous
        again) and the waiting nodes whose ``ticket`` is lower arrive at ``round_`` first; at most
        ``turn_grace_s`` (some of them are gone), a little longer for each node ahead in the queue
        so that the order holds when several give up waiting at once. So a hot spare takes a lost
        node's place, not a survivor's nor a newcomer's, and spares take places in the order they
        came."""
        self._turn = round_
        until = time.monotonic() + self.turn_grace_s + TURN_STAGGER_S * (ticket - 1)
        while time.monotonic() < until and int(self.store.add(f"r{round_}.arrivals", 0)) < members + ticket - 1:
            time.sleep(TURN_POLL_S)

    def _last_call(self, current: int) -> None:
        time.sleep(self.last_call_s)
        try:
            # A connection of its own: this node's waits on its client until the round is sealed.
            store = self.store.clone()
            if not store.check([f"r{current}.sealed"]):
                self._seal(store, current, min(int(store.add(f"r{current}.arrivals", 0)), self.max_nodes))
        except Exception:  # the store went away: every member's wait reports it
            pass

    def _seal(self, store: Any, current: int, size: int) -> None:
        """Claim round ``current``'s sealing; the winner gives the ranks, then seals it."""
        claim = self.node.to_json()
        if store.compare_set(f"r{current}.claim", "", claim).decode() != claim:
            return
        keys = [f"r{current}.node.{arrival}" for arrival in range(1, size + 1)]
        store.wait(keys, timedelta(seconds=60))  # each arrived node writes its own next
        nodes = [NodeDescription.from_json(value) for value in store.multi_get(keys)]
        ranks = ranks_of(nodes)
        store.multi_set([f"r{current}.rank.{arrival}" for arrival in range(1, size + 1)], [str(rank) for rank in ranks])
        store.set(f"r{current}.sealed", str(size))


def arrival_handler(store: Any, run_id: str, min_nodes: int, max_nodes: int, *, join_timeout_s: float = 600,
                    last_call_s: float = 30, node_rank: int = -1, local_addr: str | None = None,
                    keep_alive_s: float = KEEP_ALIVE_S, keep_alive_misses: int = KEEP_ALIVE_MISSES,
                    loopback: bool = False) -> Any:
    """torch's ``RendezvousHandler`` over ``ArrivalRendezvous`` (the store: this node's client).
    Rank 0's launcher serves its workers' store: on 127.0.0.1 only for a job on this host alone
    (``loopback``), and a new one each round where torch's switch asks for a fresh store per
    attempt (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, rendezvous_store.py), which torch would
    leave to rank 0's worker to serve on every interface."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

    from torchx_ext.launcher.loopback import LOOPBACK_ADDRESS, serve_store

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

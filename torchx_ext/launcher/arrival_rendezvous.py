"""A c10d-store rendezvous whose join costs each node a constant number of store operations, and
which keeps torch's ``DynamicRendezvousHandler`` contract.

torch's c10d handler keeps one state blob (every node, its keep-alive, the lists) that each node
rewrites by compare-and-set: N nodes joining together make on the order of N² attempts of O(N)
bytes each. Here a round is built from keys no node rewrites (all under ``torchx_ext.rdzv/<run>/``):

- ``round`` names the round open now; ``r{k}.open`` exists once round k is open;
- a node joins round k by ``add(r{k}.arrivals, 1)``: its arrival number ``a``. It writes its
  keep-alive under ``r{k}.node.{a}`` every ``keep_alive_s`` from then on, while a participant and
  while a member: its wall-clock time (as torch's handler's keep-alives) and its description
  (address, pid, ``--node-rank``, a random token, the round it was last a member of);
- the round is sealed by one compare-and-set of ``r{k}.seal`` from nothing to the arrival numbers
  in rank order: at once when ``max_nodes`` live participants are there, else at the last-call
  deadline (``r{k}.deadline``, set by the first to see ``min_nodes`` arrivals) with the live ones.
  Any participant may seal: the node that saw ``max_nodes`` arrive tries at once, and at the
  deadline participant ``a`` tries ``SEAL_STAGGER_S`` x (a - 1) after it (a few at most), so one
  does the O(N) reading and a dead one never holds the round. Live means: not withdrawn (a node
  whose join timed out takes its description back) and a keep-alive younger than ``keep_alive_s``
  x ``keep_alive_misses``. Places go to the last round's members first, then in arrival order; ranks
  by ``--node-rank`` when those are distinct, else as torch orders nodes (address, pid, token);
- a participant waits for the seal on a wake key of its own, inside the store: the sealer wakes
  all, ``set_closed`` wakes all, its keep-alive thread wakes it at each beat and deadline;
- a node that comes after a round was sealed waits outside it, polling (a waiting TCPStore client
  logs a warning every time a wait times out): as a counted waiter (``r{k+1}.waiter.{t}``, which it
  keeps alive) when the round has room or one of its members stopped its keep-alive, which
  ``num_nodes_waiting`` counts so that the members rendezvous again; else as a redundant one (a hot
  spare; torch's redundancy list), counted by nobody;
- a member that rendezvouses again opens round k+1 and arrives there at once: the other members
  count it in ``num_nodes_waiting``. When round k+1 opens, the last round's live members take their
  places first, then the waiting nodes in the order they came (each waits ``TURN_GRACE_S`` at most,
  ``TURN_STAGGER_S`` more per node ahead): a spare takes a lost node's place, not a survivor's;
- a waiter that sees every member of the sealed round stop its keep-alive (a whole job started
  again against a store that outlived it) opens the next round itself;
- ``closed`` ends every wait (``set_closed``, ``shutdown``);
- whoever opens round k deletes round k-2's keys (the rendezvous', and the agents' and watchdog's
  in its round store), so the store holds two rounds whatever the number of restarts.

Each node makes about a dozen operations to join; the sealer a few more whose payload is O(N).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from torchx_ext.launcher.arrival_keepalive import KeepAlive
from torchx_ext.launcher.store_keys import PrefixedKeys, delete_keys

BACKEND = "torchx_ext-arrivals"
logger = logging.getLogger(__name__)
NUM_NODES_WAITING_CACHE_S = 1.0
"""The agent asks for waiting nodes every monitor interval: a few store reads a second at most."""
TURN_GRACE_S = 2.0
"""How long a node waiting for a round lets the round's members and earlier waiters arrive first."""
TURN_POLL_S = 0.1
TURN_STAGGER_S = 0.3
WAIT_POLL_S = 0.25
"""How often a node waiting outside a sealed round looks whether the next one opened."""
SEAL_STAGGER_S = 0.3
SEAL_STAGGER_MAX = 10
KEEP_ALIVE_S = 5
KEEP_ALIVE_MISSES = 3
"""torch's ``keep_alive_interval`` and ``keep_alive_max_attempt`` defaults: a node whose keep-alive
is 3 x 5 s old is gone."""
WITHDRAWN = "-"
FOREVER = timedelta(days=1)


@dataclass(frozen=True)
class NodeDescription:
    addr: str
    pid: int
    node_rank: int
    token: str
    member_of: int = -1
    """The round this node was last a member of: its place comes first in the next."""

    def to_json(self) -> str:
        return json.dumps([self.addr, self.pid, self.node_rank, self.token, self.member_of])

    @staticmethod
    def from_json(text: bytes | str) -> "NodeDescription":
        addr, pid, node_rank, token, member_of = json.loads(text)
        return NodeDescription(str(addr), int(pid), int(node_rank), str(token), int(member_of))


def ranks_of(nodes: list[NodeDescription]) -> list[int]:
    """Each node's rank in its round: by ``--node-rank`` when every node gave a distinct one (a hot
    spare's, N or above, then takes the place of the node it replaced), else by (address, pid,
    token), as torch's c10d handler orders its participants (the token tells apart two launchers
    whose host name and pid are the same: host-network containers, pid 1)."""
    given = [node.node_rank for node in nodes]
    if min(given) >= 0 and len(set(given)) == len(given):
        order = sorted(range(len(nodes)), key=lambda index: given[index])
    else:
        order = sorted(range(len(nodes)), key=lambda index: (nodes[index].addr, nodes[index].pid, nodes[index].token))
    ranks = [0] * len(nodes)
    for rank, index in enumerate(order):
        ranks[index] = rank
    return ranks


def _alive(value: bytes | None, now: float, expiry_s: float) -> bool:
    """A keep-alive value ("TIME ...", or ``WITHDRAWN``; None: not written yet, the node has just
    come) still fresh at ``now``."""
    if value is None:
        return True
    text = value.decode()
    if text == WITHDRAWN:
        return False
    return now - float(text.split()[0]) <= expiry_s


_made = itertools.count()


class ArrivalRendezvous:
    """The rendezvous logic over a c10d ``store`` (each node's own client); torch's handler
    interface is ``arrival_handler``'s."""

    def __init__(self, store: Any, run_id: str, min_nodes: int, max_nodes: int, *, join_timeout_s: float = 600,
                 last_call_s: float = 30, node_rank: int = -1, local_addr: str | None = None,
                 keep_alive_s: float = KEEP_ALIVE_S, keep_alive_misses: int = KEEP_ALIVE_MISSES,
                 turn_grace_s: float = TURN_GRACE_S) -> None:
        if not 1 <= min_nodes <= max_nodes:
            raise ValueError(f"min_nodes {min_nodes} and max_nodes {max_nodes}: expected 1 <= min <= max")
        self._prefix = f"torchx_ext.rdzv/{run_id}"
        self._client = store
        self.store = PrefixedKeys(self._prefix, store)
        self.run_id = run_id
        self.min_nodes, self.max_nodes = min_nodes, max_nodes
        self.join_timeout_s, self.last_call_s = join_timeout_s, last_call_s
        self.keep_alive_s, self.keep_alive_misses = keep_alive_s, keep_alive_misses
        self.expiry_s = keep_alive_s * keep_alive_misses
        self.turn_grace_s = turn_grace_s
        self._turn: int | None = None
        """A round this node arrives at without waiting its turn (it waited, or was in the round before)."""
        # As torch's local id, the order nodes were made in one process, then a random part for
        # launchers of the same host name and pid (host-network containers, pid 1).
        self.node = NodeDescription(local_addr or socket.getfqdn(), os.getpid(), node_rank,
                                    f"{next(_made):08d}.{uuid.uuid4().hex}")
        self.round: int | None = None
        """The round this node is a member of."""
        self._member_of = -1
        self.spare = False
        """Whether this node now waits because a round was full (torch's redundancy list)."""
        self._waiting_read_at = -NUM_NODES_WAITING_CACHE_S
        self._waiting = 0
        self._keep_alive: KeepAlive | None = None

    def join(self) -> tuple[int, int, int]:
        """Wait for a round with this node in it: (round, rank, world size). Raises torch's
        RendezvousClosedError, RendezvousGracefulExitError (closed while this node waited as a
        redundant one) or RendezvousTimeoutError."""
        if self._keep_alive is None:
            self._keep_alive = KeepAlive(self.store, self.keep_alive_s)
        self._keep_alive.beat(None)  # a member that rendezvouses again has left its round
        try:
            return self._join(time.monotonic() + self.join_timeout_s)
        finally:
            self.spare = False

    def _join(self, deadline: float) -> tuple[int, int, int]:
        from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousGracefulExitError

        redundant = False
        while True:
            if self.is_closed():
                self._beat(None)
                if redundant:
                    raise RendezvousGracefulExitError(f"the rendezvous {self.run_id!r} is closed")
                raise RendezvousClosedError(f"the rendezvous {self.run_id!r} is closed")
            current = int(self.store.add("round", 0))
            if self.round is not None:
                # A member again: the next round is this node's to open (whoever is first), and
                # its place there comes before the waiting nodes'.
                if self.round >= current:
                    self._open(current + 1)
                self._turn, self.round = self.round + 1, None
                continue
            if self.store.check([f"r{current}.seal"]):
                redundant = self._wait_outside(current, deadline) or redundant
                if redundant:
                    deadline = time.monotonic() + self.join_timeout_s  # counted from when it has a round
                continue
            if current > 0 and self._turn != current:  # come while the round is open: behind the others
                members = len(self._seal_of(current - 1) or [])
                self._await_turn(current, members, self._take_ticket(current, counted=False))
            joined = self._participate(current, deadline)
            if joined is not None:
                self._member_of = self.round = joined[0]
                self._waiting_read_at = -NUM_NODES_WAITING_CACHE_S
                return joined

    def _participate(self, current: int, deadline: float) -> tuple[int, int, int] | None:
        """Arrive at round ``current`` and wait until it is sealed: this node's place, or None when
        the round was sealed without it (it then waits outside)."""
        from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousTimeoutError

        store = self.store
        arrival = int(store.add(f"r{current}.arrivals", 1))
        description = NodeDescription(self.node.addr, self.node.pid, self.node.node_rank, self.node.token,
                                      self._member_of).to_json()
        key, wake = f"r{current}.node.{arrival}", f"r{current}.wake.{arrival}"
        store.set(key, f"{time.time():.3f} {description}")
        self._beat(key, description=description, wake_key=wake, written=True)
        full_since: float | None = None  # when this node first saw max_nodes arrive, the round unsealed
        while True:
            seal = self._seal_of(current)
            if seal is not None:
                store.delete_key(wake)
                if arrival in seal:
                    return current, seal.index(arrival), len(seal)
                self._beat(None)
                return None
            closed = self.is_closed()
            if closed or time.monotonic() >= deadline:
                self._beat(None)  # no beat of its own lands after the withdrawal
                store.set(key, WITHDRAWN)
                seal = self._seal_of(current)
                if seal is not None and arrival in seal and not closed:  # sealed just before: a member
                    self._beat(key, description=description)
                    return current, seal.index(arrival), len(seal)
                self._beat(None)
                if closed:
                    raise RendezvousClosedError(f"the rendezvous {self.run_id!r} is closed")
                raise RendezvousTimeoutError(
                    f"the rendezvous {self.run_id!r} did not complete in {self.join_timeout_s:g} s: "
                    f"{int(store.add(f'r{current}.arrivals', 0))} of {self.min_nodes}..{self.max_nodes} nodes had arrived")
            arrived = int(store.add(f"r{current}.arrivals", 0))
            stagger = SEAL_STAGGER_S * min(arrival - 1, SEAL_STAGGER_MAX)
            wake_at = deadline
            due = self._seal_due(current, arrival, arrived, stagger)
            if arrived >= self.max_nodes:
                # The node that made the round full seals it at once; the others only if it stays
                # unsealed (that node died, or a participant left): one reads O(N), not all.
                full_since = time.monotonic() if full_since is None else full_since
                if arrival >= self.max_nodes or time.monotonic() >= full_since + stagger:
                    self._try_seal(current, arrived)
                else:
                    wake_at = min(wake_at, full_since + stagger)
            elif due is not None and time.time() >= due:
                self._try_seal(current, arrived)
            if due is not None and time.time() < due:  # a dead node among max_nodes: the last call
                wake_at = min(wake_at, time.monotonic() + due - time.time())
            if self._seal_of(current) is None:
                assert self._keep_alive is not None
                self._keep_alive.wake_at(wake_at)
                store.wait([wake], FOREVER)
                store.delete_key(wake)

    def _seal_due(self, current: int, arrival: int, arrived: int, stagger: float) -> float | None:
        """When (wall clock) this participant tries to seal at the last call: None before
        ``min_nodes`` came. The first to see them sets the deadline, and wakes those before it."""
        store = self.store
        if arrived < self.min_nodes:
            return None
        key = f"r{current}.deadline"
        mine = f"{time.time() + self.last_call_s:.3f}"
        deadline = store.compare_set(key, "", mine).decode()
        if deadline == mine and 1 < arrival and arrived < self.max_nodes:  # full: sealed at once
            store.multi_set([f"r{current}.wake.{a}" for a in range(1, arrival)], [""] * (arrival - 1))
        return float(deadline) + stagger

    def _try_seal(self, current: int, arrived: int) -> None:
        """Seal round ``current`` if it can be sealed now: with ``max_nodes`` live participants,
        or, past the last call, with ``min_nodes`` or more. One compare-and-set decides."""
        store = self.store
        numbers = list(range(1, arrived + 1))
        beats = self._read([f"r{current}.node.{a}" for a in numbers])
        now = time.time()
        live = [(NodeDescription.from_json(beat.decode().split(" ", 1)[1]), a) for a, beat in zip(numbers, beats)
                if beat is not None and _alive(beat, now, self.expiry_s)]
        if len(live) >= self.max_nodes:
            live.sort(key=lambda entry: (entry[0].member_of != current - 1, entry[1]))
            chosen = live[:self.max_nodes]
        elif len(live) >= self.min_nodes and store.check([f"r{current}.deadline"]) and \
                now >= float(store.get(f"r{current}.deadline")):
            chosen = live
        else:
            if len(live) < self.min_nodes:
                # torch: a round below min_nodes again has no deadline until min_nodes are back
                store.delete_key(f"r{current}.deadline")
            return
        ranks = ranks_of([node for node, _ in chosen])
        order = [a for _, a in sorted(zip(ranks, [a for _, a in chosen]))]
        seal = json.dumps(order)
        if store.compare_set(f"r{current}.seal", "", seal).decode() != seal:
            return
        store.multi_set([f"r{current}.wake.{a}" for a in numbers], [""] * len(numbers))

    def _forget(self, old: int) -> None:
        """Delete round ``old``'s keys: the rendezvous' and its round store's (the agents' and the
        watchdog's). A store that cannot list its keys (not a TCPStore) keeps them."""
        marks = (f"{self._prefix}/r{old}.", f"{self._prefix}/r{old}/")
        try:
            delete_keys(self._client, lambda key: key.startswith(marks))
        except (AttributeError, RuntimeError) as error:  # torch's store errors are RuntimeErrors
            logger.warning("could not delete the rendezvous' round %d keys: %s", old,
                           str(error).splitlines()[0] if str(error) else type(error).__name__)

    def _read(self, keys: list[str]) -> list[bytes | None]:
        """The values of ``keys``, None for one not written yet (a store's get waits for it)."""
        if not keys:
            return []
        if self.store.check(keys):
            return list(self.store.multi_get(keys))
        return [self.store.get(key) if self.store.check([key]) else None for key in keys]

    def _seal_of(self, round_: int) -> list[int] | None:
        if round_ < 0 or not self.store.check([f"r{round_}.seal"]):
            return None
        return [int(a) for a in json.loads(self.store.get(f"r{round_}.seal"))]

    def _open(self, next_round: int) -> None:
        """Open round ``next_round``; whoever does deletes round ``next_round - 2``'s keys: every node
        of it rendezvoused again or is gone (off this node's path: its keep-alive thread does it)."""
        if self.store.compare_set("round", str(next_round - 1), str(next_round)).decode() != str(next_round):
            return
        self.store.set(f"r{next_round}.open", "")
        # Members that come back together may all have opened it: one deletes, before it arrives,
        # so the round cannot form before the old keys are gone (a few ms per thousand keys).
        if next_round >= 2 and int(self.store.add(f"r{next_round}.opened", 1)) == 1:
            self._forget(next_round - 2)

    def num_nodes_waiting(self) -> int:
        """Live nodes waiting for a round after this member's: counted waiters, and nodes that
        arrived at the next round (a member that rendezvoused again among them). Read at most once
        a second; more than one when several wait, not always how many."""
        if self.round is None:
            return 0
        now = time.monotonic()
        if now - self._waiting_read_at >= NUM_NODES_WAITING_CACHE_S:
            self._waiting = self._count_waiting(self.round + 1)
            self._waiting_read_at = now
        return self._waiting

    def _count_waiting(self, next_round: int) -> int:
        store = self.store
        tickets = int(store.add(f"r{next_round}.queue", 0))
        arrived = int(store.add(f"r{next_round}.arrivals", 0))
        if tickets == 0 and arrived == 0:
            return 0
        now = time.time()
        waiters = self._read([f"r{next_round}.waiter.{t}" for t in range(1, tickets + 1)])
        counted = sum(1 for value in waiters if value is not None and value.decode().endswith(" 1")
                      and _alive(value, now, self.expiry_s))
        alive = self._read([f"r{next_round}.node.{a}" for a in range(1, arrived + 1)])
        return counted + sum(1 for value in alive if _alive(value, now, self.expiry_s))

    def is_closed(self) -> bool:
        return bool(self.store.check(["closed"]))

    def stop_beating(self) -> None:
        """Stop this node's keep-alive for good (the end, or as a node killed or frozen would)."""
        if self._keep_alive is not None:
            self._keep_alive.stop()

    def _beat(self, key: str | None, *, description: str | None = None, counted: bool | None = None,
              wake_key: str | None = None, written: bool = False) -> None:
        """Keep ``key`` alive with the time and the ``description`` (a participant's) or the
        ``counted`` flag (a waiter's); None: no key any more (written no more once this returns)."""
        if self._keep_alive is None:
            return
        after = description if description is not None else ("1" if counted else "0")
        self._keep_alive.beat(key, lambda: f"{time.time():.3f} {after}", wake_key=wake_key, written=written)

    def first_round_formed(self) -> bool:
        """Whether a first round was sealed (or the rendezvous closed): a hot spare joins after."""
        return bool(self.store.check(["r0.seal"]) or self.store.check(["closed"])
                    or int(self.store.add("round", 0)) > 0)

    def set_closed(self) -> None:
        self.stop_beating()
        self.store.set("closed", "")
        current = int(self.store.add("round", 0))
        arrived = int(self.store.add(f"r{current}.arrivals", 0))
        if arrived and not self.store.check([f"r{current}.seal"]):
            # participants waiting for a seal; the nodes waiting outside look every WAIT_POLL_S
            self.store.multi_set([f"r{current}.wake.{a}" for a in range(1, arrived + 1)], [""] * arrived)

    def round_store(self, round_: int) -> Any:
        from torch.distributed import PrefixStore

        return PrefixStore(f"{self._prefix}/r{round_}", self._client)

    def _take_ticket(self, next_round: int, counted: bool) -> int:
        ticket = int(self.store.add(f"r{next_round}.queue", 1))  # the waiters' order
        key = f"r{next_round}.waiter.{ticket}"
        self.store.set(key, f"{time.time():.3f} {'1' if counted else '0'}")
        self._beat(key, counted=counted, written=True)
        return ticket

    def _wait_outside(self, sealed: int, deadline: float) -> bool:
        """This node came after round ``sealed`` was sealed: it waits for the next round, counted
        as waiting if the round has room or lost a member (its members then rendezvous again), else
        redundant. Whether it waited as a redundant node."""
        from torch.distributed.elastic.rendezvous import RendezvousTimeoutError

        members = self._seal_of(sealed) or []
        next_round = sealed + 1
        counted = len(members) < self.max_nodes
        ticket = self._take_ticket(next_round, counted)
        redundant = self.spare = not counted
        live, looked_at = len(members), time.monotonic()
        try:
            while True:
                if self.is_closed():
                    return redundant
                if int(self.store.add("round", 0)) > sealed:
                    self._await_turn(next_round, live, ticket)
                    return redundant
                now = time.monotonic()
                if counted and now >= deadline:
                    self.store.set(f"r{next_round}.waiter.{ticket}", WITHDRAWN)
                    raise RendezvousTimeoutError(f"the rendezvous {self.run_id!r}: no round for this node in time")
                if now - looked_at >= self.keep_alive_s:
                    looked_at = now
                    wall = time.time()
                    beats = self._read([f"r{sealed}.node.{a}" for a in members])
                    live = sum(1 for value in beats if _alive(value, wall, self.expiry_s))
                    if live == 0:  # every member is gone: nobody else will open the next round
                        self._open(next_round)
                        self._await_turn(next_round, 0, ticket)
                        return redundant
                    if live < len(members) and not counted:  # torch: off the redundancy list, onto the wait list
                        counted, self.spare = True, False
                        deadline = now + self.join_timeout_s
                        self.store.set(f"r{next_round}.waiter.{ticket}", f"{wall:.3f} 1")
                        self._beat(f"r{next_round}.waiter.{ticket}", counted=True)
                time.sleep(WAIT_POLL_S)
        finally:
            self.spare = False

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

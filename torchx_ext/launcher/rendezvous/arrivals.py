"""A c10d-store rendezvous whose join costs each node a constant number of store operations, and
which keeps torch's ``DynamicRendezvousHandler`` contract. This module reads and writes the store;
what it does next is decided in ``core.py`` (the words used here are defined there).

torch's c10d handler keeps one state blob (every node, its keep-alive, the lists) that each node
rewrites by compare-and-set: N nodes joining together make on the order of N² attempts of O(N)
bytes each. Here a round is built from keys no node rewrites (all under ``torchx_ext.rdzv/<run>/``):

- ``round`` names the round open now; ``r{k}.open`` exists once round k is open;
- a node joins round k by ``add(r{k}.arrivals, 1)``: its arrival number ``a``. It keeps
  ``r{k}.node.{a}`` alive every ``keep_alive_s`` from then on, while a participant and while a
  member: a beat counter and its description (address, pid, ``--node-rank``, a random token, the
  round it was last a member of and its rank there). A node that withdraws (its join timed out, or
  the rendezvous closed) writes ``-`` there and counts itself in ``r{k}.withdrawn`` (and in
  ``r{k}.dips`` when that leaves fewer than ``min_nodes``: every last call starts again);
- the round is sealed by one compare-and-set of ``r{k}.seal`` from nothing to the arrival numbers
  in rank order: at once when ``max_nodes`` are present, else once the last call has run on the
  sealer's own clock from when it saw ``min_nodes`` present (arrived, not withdrawn), with the live
  ones. The first arrivals try first (``SEAL_STAGGER_S`` apart), so one does the O(N) reading and
  a dead one never holds the round; they also watch the others' keys while they wait, so that a
  node that died before the seal is left out;
- a participant waits for the seal on a wake key of its own, inside the store: the sealer wakes
  all, ``set_closed`` wakes all, the arrival that brings ``min_nodes`` wakes those before it, its
  keep-alive thread wakes it at each beat and deadline. At each wake it also reads which round is
  open: one frozen while the job moved on arrives at the open round when it thaws;
- a node that comes after a round was sealed waits outside it, polling: as a counted waiter
  (``r{k+1}.waiter.{t}``, kept alive) when the round has room or one of its members went silent,
  which ``num_nodes_waiting`` counts so that the members rendezvous again; else as a spare,
  counted by nobody;
- a member that rendezvouses again opens round k+1, arrives there at once (the other members count
  it) and then writes ``+`` on its key of round k: it left alive. Waiters let the last round's
  members arrive first, as long as their keys move (workers slow to stop), then arrive in the order
  they came (``came``, a counter a node takes once and keeps while it waits: a spare that a round
  left out keeps its place in the next, whichever thread takes a ticket there first): a spare takes
  a lost node's place, not a survivor's;
- a waiter that sees every member of the sealed round go silent (a whole job started again against
  a store that outlived it) opens the next round itself;
- ``closed`` ends every wait (``set_closed``, ``shutdown``);
- whoever opens round k deletes round k-2's keys (the rendezvous', and the agents', the workers'
  and the watchdog's in its round store), so the store holds two rounds whatever the restarts.

The waits are ``yield``s of a generator (``joining``): ``join`` waits for real; a test drives many
nodes' generators over one store on a simulated clock. Each node makes a constant number of operations
to join (about 30, whatever N: each wake reads the round's counters); the sealer a few more whose
payload is O(N).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from torchx_ext.launcher.rendezvous.keepalive import KeepAlive
from torchx_ext.launcher.rendezvous.core import (LEFT, WITHDRAWN, Candidate, batch_before, LastCallFrom, Member, NodeDescription, NotYet, Outside,
                                                 OutsideView, ParticipantView, Seen, SealedWithout, Sealing, Settings,
                                                 Sightings, Superseded, TrySeal, TurnView, Wait, Withdraw, beat_payload,
                                                 beat_value, choose_members, members_coming, my_turn, outside_action,
                                                 participant_action, present, track_since, waiters_ahead,
                                                 waiting_count)
from torchx_ext.launcher.rendezvous.store_keys import PrefixedKeys, delete_keys

BACKEND = "torchx_ext-arrivals"
logger = logging.getLogger(__name__)
NUM_NODES_WAITING_CACHE_S = 1.0
"""The agent asks for waiting nodes every monitor interval: a few store reads a second at most."""
TURN_GRACE_S = 2.0
"""How long a node waiting for a round lets a silent member or earlier waiter arrive first."""
TURN_POLL_S = 0.1
WAIT_POLL_S = 0.25
"""How often a node waiting outside a sealed round looks whether the next one opened."""
KEEP_ALIVE_S = 5
KEEP_ALIVE_MISSES = 3
"""torch's ``keep_alive_interval`` and ``keep_alive_max_attempt`` defaults: a node whose keep-alive
has not moved for 3 x 5 s is gone."""
FOREVER = timedelta(days=1)


@dataclass(frozen=True)
class Pause:
    """What a joining node waits for: ``until`` on its monotonic clock, or ``wake`` set sooner."""

    until: float
    wake: str | None = None


class KeepAliveLike(Protocol):
    def beat(self, key: str | None, value: Callable[[int], str] | None = None, wake_key: str | None = None,
             written: bool = False) -> None: ...

    def wake_at(self, monotonic: float | None) -> None: ...

    def stop(self) -> None: ...


Steps = Generator[Pause, None, Any]

_made = itertools.count()


class ArrivalRendezvous:
    """The rendezvous over a c10d ``store`` (each node's own client); torch's handler interface is
    ``arrival_handler``'s. ``clock`` (monotonic) and ``keep_alive`` are the real ones but for the
    simulation's nodes."""

    def __init__(self, store: Any, run_id: str, min_nodes: int, max_nodes: int, *, join_timeout_s: float = 600,
                 last_call_s: float = 30, node_rank: int = -1, local_addr: str | None = None,
                 keep_alive_s: float = KEEP_ALIVE_S, keep_alive_misses: int = KEEP_ALIVE_MISSES,
                 turn_grace_s: float = TURN_GRACE_S, clock: Callable[[], float] = time.monotonic,
                 keep_alive: Callable[[Any, float], KeepAliveLike] = KeepAlive) -> None:
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
        self.settings = Settings(min_nodes, max_nodes, last_call_s, keep_alive_s, self.expiry_s, turn_grace_s)
        self.clock = clock
        self._make_keep_alive = keep_alive
        self.sightings = Sightings(self.expiry_s)
        self._turn: int | None = None
        """A round this node arrives at without waiting its turn (it waited, or was in the round before)."""
        # As torch's local id, the order nodes were made in one process, then a random part for
        # launchers of the same host name and pid (host-network containers, pid 1).
        self.node = NodeDescription(local_addr or socket.getfqdn(), os.getpid(), node_rank,
                                    f"{next(_made):08d}.{uuid.uuid4().hex}")
        self.round: int | None = None
        """The round this node is a member of."""
        self._member_of, self._rank = -1, -1
        self._member_key: str | None = None
        """This node's key in the round it was a member of, marked ``LEFT`` once it arrived anew."""
        self.spare = False
        """Whether this node now waits because a round was full (torch's redundancy list)."""
        self._waiting_read_at: float | None = None
        self._waiting = 0
        self._keep_alive: KeepAliveLike | None = None
        self._poked = -1
        """The round in which this node last woke the watchers (once a round)."""
        self._came: int | None = None
        """Its place in the order nodes came to wait (the job's ``came`` counter), kept until it is a member."""
        self.spent: dict[str, float] = {}
        """Where its last join spent its time, on its own clock: ``outside`` a sealed round, its ``turn``
        at a reopened one, waiting for the ``seal`` (the launcher's line after a restart says it)."""

    # --- joining: the generator and its real driver ---------------------------------------------

    def join(self) -> tuple[int, int, int]:
        """Wait for a round with this node in it: (round, rank, world size). Raises torch's
        RendezvousClosedError, RendezvousGracefulExitError (closed while this node waited as a
        spare) or RendezvousTimeoutError."""
        steps = self.joining()
        try:
            pause = next(steps)
            while True:
                self._pause(pause)
                pause = steps.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _pause(self, pause: Pause) -> None:
        if pause.wake is None:
            time.sleep(max(0.0, pause.until - self.clock()))
            return
        assert self._keep_alive is not None
        self._keep_alive.wake_at(pause.until)
        self.store.wait([pause.wake], FOREVER)
        self.store.delete_key(pause.wake)

    def joining(self) -> Steps:
        """``join``'s steps: yields each wait (``Pause``), returns (round, rank, world size)."""
        if self._keep_alive is None:
            self._keep_alive = self._make_keep_alive(self.store, self.keep_alive_s)
        self._keep_alive.beat(None)  # a member that rendezvouses again has left its round
        self.spent = {}
        try:
            return (yield from self._joining(self.clock() + self.join_timeout_s))
        finally:
            self.spare = False

    def _joining(self, deadline: float) -> Steps:
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
                redundant = (yield from self._waiting_outside(current, deadline)) or redundant
                if redundant:
                    deadline = self.clock() + self.join_timeout_s  # counted from when it has a round
                continue
            if current > 0 and self._turn != current:  # come while the round is open: behind the others
                yield from self._awaiting_turn(current, self._take_ticket(current, counted=False))
                if int(self.store.add("round", 0)) != current:
                    continue  # the job moved on while it waited its turn (or it was frozen): no arrival there
            arrived_at = self.clock()
            try:
                joined = yield from self._participating(current, deadline)
            finally:
                self._spend("seal", arrived_at)
            if joined is not None:
                self.round, self._rank = joined[0], joined[1]
                self._member_of, self._came = self.round, None
                self._waiting_read_at = None
                for old in range(max(0, self.round - 3), self.round - 1):
                    self.sightings.forget_round(old)
                return joined

    def _participating(self, current: int, deadline: float) -> Steps:
        """Arrive at round ``current`` and wait until it is sealed: this node's place, or None when
        the round was sealed without it (it then waits outside) or the job moved past it."""
        from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousTimeoutError

        store, settings = self.store, self.settings
        before = self.clock()
        arrival = int(store.add(f"r{current}.arrivals", 1))
        self.sightings.saw_arrivals(current, arrival - 1, before)  # every later arrival is newer
        description = replace(self.node, member_of=self._member_of, rank=self._rank).to_json()
        key, wake = f"r{current}.node.{arrival}", f"r{current}.wake.{arrival}"
        store.set(key, beat_value(0, description))
        self._beat(key, description=description, wake_key=wake, written=True)
        if self._member_key is not None:
            if self._member_of == current - 1:  # arrived: it left its place there alive
                store.set(self._member_key, LEFT)
            self._member_key = None
        present_since: float | None = None
        full_since: float | None = None
        woke_earlier = False
        looked_at: float | None = None
        seen_dips = 0
        tried: tuple[tuple[int, int, int], bool] | None = None
        """The counts it last tried to seal with, and whether the last call was over then."""
        while True:
            now = self.clock()
            # The open round first: a node frozen while the job moved on reads nothing of its
            # round (deleted, or soon to be) and writes nothing there but its own key, taken back.
            open_round = int(store.add("round", 0))
            seal = self._seal_of(current)
            arrived, withdrawn, dips = self._counters(current, "arrivals", "withdrawn", "dips")
            self.sightings.saw_arrivals(current, arrived, now)
            here = present(arrived, withdrawn)
            if dips != seen_dips:  # present fell below min_nodes since the last look, however briefly
                seen_dips, present_since = dips, None
            if (here == self.min_nodes and arrival == arrived and arrival > 1 and not woke_earlier
                    and open_round == current and seal is None):
                # This arrival brings min_nodes: those before it start their last call now.
                woke_earlier = True
                store.multi_set([f"r{current}.wake.{a}" for a in range(1, arrival)], [""] * (arrival - 1))
            present_since = track_since(present_since, here >= self.min_nodes, now)
            full_since = track_since(full_since, here >= self.max_nodes, now)
            if (arrival <= settings.watchers and open_round == current and seal is None
                    and (looked_at is None or now - looked_at >= self.keep_alive_s / 2)):
                looked_at = now
                self._candidates(current, arrival, arrived, now)  # so that one dead before the seal is seen silent
            counts = (arrived, withdrawn, dips)
            batch_gone = False
            if (arrival > settings.watchers and open_round == current and seal is None
                    and (full_since is not None or (present_since is not None
                                                    and now >= present_since + self.last_call_s))):
                # Due and unsealed: are the watchers before it gone? (a few keys, at each wake)
                before_keys = [f"r{current}.node.{a}" for a in batch_before(arrival, settings)]
                batch_gone = all(self.sightings.look(key, value, now) in (Seen.SILENT, Seen.WITHDRAWN)
                                 for key, value in zip(before_keys, self._read(before_keys)))
            action = participant_action(ParticipantView(
                now=now, round_=current, arrival=arrival, open_round=open_round, closed=self.is_closed(), seal=seal,
                arrived=arrived, withdrawn=withdrawn, join_deadline=deadline, present_since=present_since,
                full_since=full_since, batch_before_gone=batch_gone, tried_over=tried[1] if tried is not None and tried[0] == counts else None),
                settings)
            if isinstance(action, Member):
                store.delete_key(wake)
                self._beat(key, description=description)
                self._member_key = key
                return current, action.rank, action.size
            if isinstance(action, SealedWithout):
                store.delete_key(wake)
                self._beat(None)
                return None
            if isinstance(action, Superseded):  # thawed: its round's keys may be gone already
                self._beat(None)
                store.delete_key(key)
                store.delete_key(wake)
                return None
            if isinstance(action, Withdraw):
                self._beat(None)  # no beat of its own lands after the withdrawal
                store.set(key, WITHDRAWN)
                left = int(store.add(f"r{current}.arrivals", 0)) - int(store.add(f"r{current}.withdrawn", 1))
                if left < self.min_nodes:  # below min_nodes again: every last call starts anew
                    store.add(f"r{current}.dips", 1)
                seal = self._seal_of(current)
                if seal is not None and arrival in seal and not action.closed:  # sealed just before: a member
                    self._beat(key, description=description)
                    self._member_key = key
                    return current, seal.index(arrival), len(seal)
                if action.closed:
                    raise RendezvousClosedError(f"the rendezvous {self.run_id!r} is closed")
                raise RendezvousTimeoutError(
                    f"the rendezvous {self.run_id!r} did not complete in {self.join_timeout_s:g} s: "
                    f"{arrived} of {self.min_nodes}..{self.max_nodes} nodes had arrived")
            if isinstance(action, TrySeal):
                tried = (counts, action.last_call_over)
                outcome = self._try_seal(current, arrival, arrived, action.last_call_over)
                if outcome is NotYet.BELOW_MIN:
                    present_since = None  # torch: no deadline until min_nodes are live again
                if isinstance(outcome, LastCallFrom):  # the min-th live one came later than it counted
                    present_since = max(present_since or outcome.since, outcome.since)
                    tried = (counts, False)  # tried before its last call: once more when that is over
                if isinstance(outcome, NotYet | LastCallFrom) and self._seal_of(current) is None:
                    yield Pause(min(deadline, now + self.keep_alive_s / 2), wake)  # a second look once keys can move
                continue
            assert isinstance(action, Wait)
            yield Pause(action.until, wake)

    def _candidates(self, current: int, arrival: int, arrived: int, now: float) -> list[Candidate]:
        """Round ``current``'s participants as this node (``arrival``) sees them now."""
        numbers = list(range(1, arrived + 1))
        values = self._read([f"r{current}.node.{a}" for a in numbers])
        found = []
        for number, value in zip(numbers, values):
            seen = self.sightings.look(f"r{current}.node.{number}", value, now,
                                       self.sightings.written_after(current, number))
            if number == arrival and seen.counts:
                seen = Seen.ALIVE  # itself
            node = NodeDescription.parse(beat_payload(value)) if value is not None and seen.counts else None
            since = self.sightings.first_saw(current, number)
            if node is not None:
                found.append(Candidate(number, node, seen, now if since is None else since))
        return found

    def _try_seal(self, current: int, arrival: int, arrived: int, last_call_over: bool) -> Sealing | LastCallFrom | NotYet:
        """Seal round ``current`` if ``choose_members`` says so; one compare-and-set decides."""
        now = self.clock()
        decision = choose_members(self._candidates(current, arrival, arrived, now), current, self.settings,
                                  last_call_over, now)
        watchers = self.settings.watchers
        if decision is NotYet.UNKNOWN and arrival > watchers and self._poked != current:
            # The first arrivals have watched the others' keys since they came: they can tell.
            # Once a round: they look again on their own until it is sealed.
            self._poked = current
            self.store.multi_set([f"r{current}.wake.{a}" for a in range(1, watchers + 1)], [""] * watchers)
        if not isinstance(decision, Sealing):
            return decision
        seal = json.dumps(decision.order)
        if self.store.compare_set(f"r{current}.seal", "", seal).decode() == seal:
            self.store.multi_set([f"r{current}.wake.{a}" for a in range(1, arrived + 1)], [""] * arrived)
        return decision

    # --- waiting outside a sealed round, and a turn at the next --------------------------------

    def _members_seen(self, round_: int, members: list[int], now: float) -> list[Seen]:
        keys = [f"r{round_}.node.{a}" for a in members]
        return [self.sightings.look(key, value, now) for key, value in zip(keys, self._read(keys))]

    def _waiting_outside(self, sealed: int, deadline: float) -> Steps:
        """This node came after round ``sealed`` was sealed: it waits for the next round, counted
        as waiting if the round has room or a member went silent (its members then rendezvous
        again), else as a spare. Whether it waited as a spare."""
        from torch.distributed.elastic.rendezvous import RendezvousTimeoutError

        members = self._seal_of(sealed) or []
        next_round = sealed + 1
        counted = len(members) < self.max_nodes
        ticket = self._take_ticket(next_round, counted)
        redundant = self.spare = not counted
        looked_at: float | None = None
        came: float | None = self.clock()
        try:
            while True:
                now = self.clock()
                seen: list[Seen] | None = None
                if looked_at is None or now - looked_at >= self.keep_alive_s / 2:  # often enough to see a key move
                    looked_at = now
                    seen = self._members_seen(sealed, members, now)
                action = outside_action(OutsideView(now=now, sealed=sealed, open_round=int(self.store.add("round", 0)),
                                                    closed=self.is_closed(), counted=counted, deadline=deadline,
                                                    members=seen))
                if action is Outside.CLOSED:
                    return redundant
                if action is Outside.NEXT_ROUND_OPEN:
                    self._spend("outside", came)
                    came = None  # what comes next is its turn
                    yield from self._awaiting_turn(next_round, ticket)
                    return redundant
                if action is Outside.TIMED_OUT:
                    self._beat(None)  # first: no beat in flight lands after the withdrawal
                    self.store.set(f"r{next_round}.waiter.{ticket}", WITHDRAWN)
                    raise RendezvousTimeoutError(f"the rendezvous {self.run_id!r}: no round for this node in time")
                if action is Outside.OPEN_NEXT:
                    self._spend("outside", came)
                    came = None  # what comes next is its turn
                    self._open(next_round)
                    yield from self._awaiting_turn(next_round, ticket)
                    return redundant
                if action is Outside.COUNT_ME:
                    counted, self.spare = True, False
                    deadline = now + self.join_timeout_s
                    # written by the keep-alive thread at once: no beat of "not counted" lands after it
                    self._beat(f"r{next_round}.waiter.{ticket}", counted=True)
                yield Pause(now + WAIT_POLL_S)
        finally:
            self.spare = False
            self._spend("outside", came)

    def _awaiting_turn(self, round_: int, ticket: int) -> Steps:
        """Let the last round's members and the waiting nodes whose ``ticket`` is lower arrive at
        ``round_`` first (``my_turn``). So a hot spare takes a lost node's place, not a survivor's
        nor a newcomer's, and spares take places in the order they came."""
        self._turn = round_
        members = self._seal_of(round_ - 1) or []
        started = self.clock()
        try:
            yield from self._taking_turn(round_, ticket, members, started)
        finally:
            self._spend("turn", started)

    def _taking_turn(self, round_: int, ticket: int, members: list[int], started: float) -> Steps:
        clear_since: float | None = None
        looked_at: float | None = None
        seen_arrived, look_again = -1, False
        places: list[int | None] = []
        while True:
            if self.is_closed():
                return  # the caller raises, or releases a spare
            now = self.clock()
            arrived, queued = self._counters(round_, "arrivals", "queue")
            # Where the waiters that came since stand, and those whose place was not written yet
            # (between their two calls, or dead there): their keys alone, not all N each poll.
            unknown = [t for t in range(1, queued + 1) if t > len(places) or places[t - 1] is None]
            if unknown:
                places += [None] * (queued - len(places))
                for t, value in zip(unknown, self._read([f"r{round_}.came.{t}" for t in unknown])):
                    places[t - 1] = None if value is None else int(value)
            # The members' keys are O(N): read when an arrival came (a member marks its old key
            # "left" once arrived: read once more a poll later), else every half beat.
            if arrived != seen_arrived or look_again or looked_at is None or now - looked_at >= self.keep_alive_s / 2:
                look_again = arrived != seen_arrived
                looked_at, seen_arrived = now, arrived
                seen = self._members_seen(round_ - 1, members, now)
            keys = [f"r{round_ - 1}.node.{a}" for a in members]
            quiet = [self.sightings.unchanged_for(key, now) for key in keys]
            clear_since = track_since(clear_since, not members_coming(seen, quiet, self.settings), now)
            assert self._came is not None
            view = TurnView(now=now, started=started, arrived=arrived, ahead=waiters_ahead(self._came, ticket, places),
                            members=seen, clear_since=clear_since)
            if my_turn(view, self.settings):
                return
            yield Pause(now + TURN_POLL_S)

    def _spend(self, phase: str, since: float | None) -> None:
        if since is not None:
            self.spent[phase] = self.spent.get(phase, 0.0) + self.clock() - since

    def _take_ticket(self, next_round: int, counted: bool) -> int:
        if self._came is None:  # once: a spare a round left out keeps its place in the next
            self._came = int(self.store.add("came", 1))
        ticket = int(self.store.add(f"r{next_round}.queue", 1))
        self.store.set(f"r{next_round}.came.{ticket}", str(self._came))  # the waiters' order
        key = f"r{next_round}.waiter.{ticket}"
        self.store.set(key, beat_value(0, "1" if counted else "0"))
        self._beat(key, counted=counted, written=True)
        return ticket

    # --- a member's questions, the store's keys ----------------------------------------------

    def num_nodes_waiting(self) -> int:
        """Live nodes waiting for a round after this member's: counted waiters, and nodes that
        arrived at the next round (a member that rendezvoused again among them). Read at most once
        a second; more than one when several wait, not always how many."""
        if self.round is None:
            return 0
        now = self.clock()
        if self._waiting_read_at is None or now - self._waiting_read_at >= NUM_NODES_WAITING_CACHE_S:
            self._waiting = self._count_waiting(self.round + 1, now)
            self._waiting_read_at = now
        return self._waiting

    def _count_waiting(self, next_round: int, now: float) -> int:
        store = self.store
        tickets, arrived = self._counters(next_round, "queue", "arrivals")
        if tickets == 0 and arrived == 0:
            return 0
        waiter_keys = [f"r{next_round}.waiter.{t}" for t in range(1, tickets + 1)]
        waiters = [(self.sightings.look(key, value, now), value is not None and beat_payload(value) == "1")
                   for key, value in zip(waiter_keys, self._read(waiter_keys))]
        arrival_keys = [f"r{next_round}.node.{a}" for a in range(1, arrived + 1)]
        arrivals = [self.sightings.look(key, value, now) for key, value in zip(arrival_keys, self._read(arrival_keys))]
        return waiting_count(waiters, arrivals)

    def _forget(self, old: int) -> None:
        """Delete round ``old``'s keys: the rendezvous' and its round store's (the agents', the
        workers' and the watchdog's). A store that cannot list its keys (not a TCPStore) keeps them."""
        marks = (f"{self._prefix}/r{old}.", f"{self._prefix}/r{old}/")
        try:
            delete_keys(self._client, lambda key: key.startswith(marks))
        except (AttributeError, RuntimeError) as error:  # torch's store errors are RuntimeErrors
            logger.warning("could not delete the rendezvous' round %d keys: %s", old,
                           str(error).splitlines()[0] if str(error) else type(error).__name__)

    def _counters(self, round_: int, *names: str) -> list[int]:
        """Round ``round_``'s counters ``names``, 0 for one not counted yet; read without writing
        them, so that a node behind the job never writes a deleted round's key anew."""
        return [int(value) if value else 0 for value in (self.store.peek(f"r{round_}.{name}") for name in names)]

    def _read(self, keys: list[str]) -> list[bytes | None]:
        """The values of ``keys``, None for one not written yet. All there: one read of all (a
        node frozen between the two calls while its round was deleted waits the store's timeout
        and reads them as gone); else one at a time, each at once."""
        if not keys:
            return []
        if self.store.check(keys):
            try:
                return list(self.store.multi_get(keys))
            except RuntimeError:  # torch's store errors: deleted since the check
                return [None] * len(keys)
        return [self.store.peek(key) for key in keys]

    def _seal_of(self, round_: int) -> list[int] | None:
        seal = self.store.peek(f"r{round_}.seal") if round_ >= 0 else None
        return None if seal is None else [int(a) for a in json.loads(seal)]

    def _open(self, next_round: int) -> None:
        """Open round ``next_round``; whoever does deletes round ``next_round - 2``'s keys: every node
        of it rendezvoused again or is gone."""
        if self.store.compare_set("round", str(next_round - 1), str(next_round)).decode() != str(next_round):
            return
        self.store.set(f"r{next_round}.open", "")
        # Members that come back together may all have opened it: one deletes, before it arrives,
        # so the round cannot form before the old keys are gone (a few ms per thousand keys).
        if next_round >= 2 and int(self.store.add(f"r{next_round}.opened", 1)) == 1:
            self._forget(next_round - 2)

    def is_closed(self) -> bool:
        return bool(self.store.check(["closed"]))

    def stop_beating(self) -> None:
        """Stop this node's keep-alive for good (the end, or as a node killed or frozen would)."""
        if self._keep_alive is not None:
            self._keep_alive.stop()

    def _beat(self, key: str | None, *, description: str | None = None, counted: bool | None = None,
              wake_key: str | None = None, written: bool = False) -> None:
        """Keep ``key`` alive with the beat counter and the ``description`` (a participant's) or
        the ``counted`` flag (a waiter's); None: no key any more (written no more once this returns)."""
        if self._keep_alive is None:
            return
        after = description if description is not None else ("1" if counted else "0")
        self._keep_alive.beat(key, lambda count: beat_value(count, after), wake_key=wake_key, written=written)

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

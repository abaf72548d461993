"""The arrival rendezvous' decisions, apart from the store and the clock.

``arrivals.py`` reads what it needs from the store, hands it here with its own monotonic
clock's reading, and does what comes back; nothing here touches a store, a socket or a clock. So
the decisions can be driven through many states and interleavings without processes
(``tests/unit/test_rendezvous_core.py``), as torch tests its ``_RendezvousJoinOp``.

Words, and torch's (``dynamic_rendezvous.py``) for the same things:

- *arrival*: a node joining an open round (torch: a participant); its arrival number orders it;
- *seal*: the one write that completes a round with its members in rank order (torch: complete);
- *last call*: torch's last-call deadline, counted on each node's own clock from when it saw
  ``min_nodes`` live arrivals;
- *waiter*: a node come after the seal, counted by ``num_nodes_waiting`` (torch: the wait list);
  a *spare* is one that waits while the round is full and counts for nobody (torch: the
  redundancy list);
- *turn*: when a round reopens, the last round's members arrive first, then the waiters in the
  order they came (torch: whoever comes first).

Liveness never compares clocks. A keep-alive key holds a beat counter its owner moves on every
interval; an observer (``Sightings``) judges the owner gone when it has seen the same value for
the expiry on its own monotonic clock. A node whose clock is off by minutes, or jumps, decides
the same. Its one cost: an observer that has just started looking gives the owner the expiry,
as torch's handler does to a keep-alive written just now.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

WITHDRAWN = "-"
"""A participant's key once its join timed out or the rendezvous closed: it takes its place back."""
LEFT = "+"
"""A member's key in its round once it arrived at the next one (it left alive; its place is there)."""


@dataclass(frozen=True)
class Settings:
    min_nodes: int
    max_nodes: int
    last_call_s: float
    keep_alive_s: float
    expiry_s: float
    """``keep_alive_s`` x the misses allowed: a key unchanged this long is its owner's last."""
    turn_grace_s: float
    """How long a node waits for a member or an earlier waiter that is silent, at its turn."""
    seal_stagger_s: float = 0.3
    seal_stagger_max: int = 10
    watchers: int = 3
    """The first arrivals watch every participant's key while they wait, and try to seal again
    until it is sealed; the later ones try once per change they see (``watches``)."""

    @property
    def turn_limit_s(self) -> float:
        """The longest a node waits for its turn, for members still beating (workers slow to stop)."""
        return self.expiry_s + self.turn_grace_s


@dataclass(frozen=True)
class NodeDescription:
    addr: str
    pid: int
    node_rank: int
    token: str
    member_of: int = -1
    """The round this node was last a member of (its place comes first in the next) ..."""
    rank: int = -1
    """... and its group rank there, which it keeps when it can."""

    def to_json(self) -> str:
        return json.dumps([self.addr, self.pid, self.node_rank, self.token, self.member_of, self.rank])

    @staticmethod
    def from_json(text: bytes | str) -> "NodeDescription":
        """A description as ``to_json`` writes it, or as the version before wrote it (no rank)."""
        addr, pid, node_rank, token, member_of, *rank = json.loads(text)
        return NodeDescription(str(addr), int(pid), int(node_rank), str(token), int(member_of),
                               int(rank[0]) if rank else -1)

    @staticmethod
    def parse(text: bytes | str) -> "NodeDescription | None":
        """``from_json``, or None for a value that is no description (nothing to seat)."""
        try:
            return NodeDescription.from_json(text)
        except (ValueError, TypeError):  # json's errors are ValueErrors
            return None

    @property
    def torch_order(self) -> tuple[str, int, str]:
        """How torch's c10d handler orders participants (host name, pid), then a random token: two
        launchers with the same host name and pid (host-network containers, pid 1) still differ."""
        return self.addr, self.pid, self.token


def beat_value(count: int, rest: str) -> str:
    """A keep-alive key's value: the owner's beat counter, then what it says of itself."""
    return f"{count} {rest}"


def beat_payload(value: bytes | str) -> str:
    """What a keep-alive value says after its counter."""
    text = value.decode() if isinstance(value, bytes) else value
    return text.split(" ", 1)[1] if " " in text else ""


class Seen(Enum):
    ABSENT = "absent"  # not written yet: the node has just come
    ALIVE = "alive"  # its key was written less than the expiry ago
    UNKNOWN = "unknown"  # seen for a moment only, and not known to be new: it may have died long ago
    SILENT = "silent"  # unchanged for the expiry: dead, frozen or cut off
    WITHDRAWN = "withdrawn"
    LEFT = "left"  # a member that arrived at the next round

    @property
    def counts(self) -> bool:
        """Whether a node seen so still counts, given the benefit of the doubt (torch keeps a
        node until its keep-alive expires, or it leaves)."""
        return self in (Seen.ABSENT, Seen.ALIVE, Seen.UNKNOWN)


@dataclass
class _Sighting:
    value: bytes
    since: float
    """When this observer first saw ``value``."""
    written_after: float | None
    """A time before which ``value`` was not written, when known: when this observer last saw
    another value there, or saw the round with fewer arrivals than the key's."""
    looked: float


class Sightings:
    """What one node saw of keep-alive keys, and since when on its own monotonic clock. Nothing is
    ever compared with the time a value was written, nor with another node's clock. A key's owner
    is alive when its value is known to have been written within the expiry (this node saw another
    value there, or no such arrival yet, less than the expiry ago); silent once this node has seen
    the same value for the expiry; unknown in between (a first look, or a look after a long gap)."""

    def __init__(self, expiry_s: float) -> None:
        self.expiry_s = expiry_s
        self._seen: dict[str, _Sighting] = {}
        self._counts: dict[int, tuple[float, int]] = {}
        """Per round, the last time this node saw its arrival counter, and what it read."""
        self._below: dict[tuple[int, int], float] = {}
        self._first: dict[tuple[int, int], float] = {}
        """Per round and count, when this node first saw that many arrivals."""

    def saw_arrivals(self, round_: int, arrived: int, now: float) -> None:
        """Record that round ``round_`` had ``arrived`` arrivals at ``now``: any later arrival's key
        was written after it."""
        last = self._counts.get(round_)
        if last is not None and last[1] != arrived:
            self._below[(round_, last[1])] = last[0]  # the last moment it was last[1]
        self._counts[round_] = (now, arrived)
        self._first.setdefault((round_, arrived), now)

    def first_saw(self, round_: int, arrival: int) -> float | None:
        """When this node first knew of arrival ``arrival`` at round ``round_`` (it came no later)."""
        times = [when for (seen_round, count), when in self._first.items() if seen_round == round_ and count >= arrival]
        return min(times) if times else None

    def written_after(self, round_: int, arrival: int) -> float | None:
        """The latest time this node saw round ``round_`` with fewer than ``arrival`` arrivals."""
        last = self._counts.get(round_)
        if last is not None and last[1] < arrival:
            return last[0]
        times = [when for (seen_round, count), when in self._below.items() if seen_round == round_ and count < arrival]
        return max(times) if times else None

    def look(self, key: str, value: bytes | None, now: float, written_after: float | None = None) -> Seen:
        """Record ``value`` read from ``key`` at ``now`` and judge its owner (``written_after``: a
        bound this node knows for a key it never saw)."""
        if value is None:
            return Seen.ABSENT
        text = value.decode()
        if text == WITHDRAWN:
            return Seen.WITHDRAWN
        if text == LEFT:
            return Seen.LEFT
        last = self._seen.get(key)
        if last is None or last.value != value:
            last = _Sighting(value, now, written_after if last is None else last.looked, now)
            self._seen[key] = last
        last.looked = now
        if now - last.since > self.expiry_s:
            return Seen.SILENT
        if last.written_after is not None and now - last.written_after <= self.expiry_s:
            return Seen.ALIVE
        return Seen.UNKNOWN

    def unchanged_for(self, key: str, now: float) -> float:
        """How long ``key`` has shown the same value (0 if never seen)."""
        last = self._seen.get(key)
        return 0.0 if last is None else now - last.since

    def forget_round(self, round_: int) -> None:
        """Forget round ``round_``'s keys (its keys are deleted from the store)."""
        mark = f"r{round_}."
        for key in [key for key in self._seen if key.startswith(mark)]:
            del self._seen[key]
        self._counts.pop(round_, None)
        for table in (self._below, self._first):
            for entry in [entry for entry in table if entry[0] == round_]:
                del table[entry]


@dataclass(frozen=True)
class RankClaim:
    """What a node brings to the choice of ranks."""

    kept: int | None
    """Its rank in the round just before, if it was a member there."""
    node_rank: int
    order: tuple[object, ...]
    """torch's order, for nodes with no distinct ``--node-rank``."""


def assign_ranks(claims: Sequence[RankClaim]) -> list[int]:
    """Each node's group rank in a new round of ``len(claims)`` nodes. A member of the round just
    before keeps its rank when it is below the new size (a checkpoint sharded by rank stays each
    survivor's); the other nodes take the free ranks in order: by ``--node-rank`` when every node
    gave a distinct one (a hot spare, N or above, so takes the lost node's rank), else in torch's
    order. Two claiming one rank (only where rounds are not numbered alike): the first in order
    keeps it."""
    size = len(claims)
    given = [claim.node_rank for claim in claims]
    by_node_rank = bool(claims) and min(given) >= 0 and len(set(given)) == size

    def order(index: int) -> tuple[object, ...]:
        return (given[index],) if by_node_rank else claims[index].order

    ranks: list[int | None] = [None] * size
    taken: set[int] = set()
    for index in sorted(range(size), key=order):
        kept = claims[index].kept
        if kept is not None and 0 <= kept < size and kept not in taken:
            ranks[index] = kept
            taken.add(kept)
    free = iter(rank for rank in range(size) if rank not in taken)
    for index in sorted((index for index in range(size) if ranks[index] is None), key=order):
        ranks[index] = next(free)
    return [rank for rank in ranks if rank is not None]


def ranks_of(nodes: Sequence[NodeDescription], previous_round: int = -1) -> list[int]:
    """Each node's rank in a round following ``previous_round``: ``assign_ranks``."""
    return assign_ranks([RankClaim(node.rank if node.member_of == previous_round >= 0 else None, node.node_rank,
                                   node.torch_order) for node in nodes])


@dataclass(frozen=True)
class Candidate:
    arrival: int
    node: NodeDescription
    seen: Seen
    since: float
    """When the node choosing first knew of this arrival, on its own clock (it came no later)."""


@dataclass(frozen=True)
class Sealing:
    """Seal with these arrival numbers, in rank order."""

    order: list[int]


@dataclass(frozen=True)
class LastCallFrom:
    """Not yet: the last call runs from ``since``, when the min-th of the live participants
    arrived as this node saw it (an earlier one is dead: it counted toward ``min_nodes`` before)."""

    since: float


class NotYet(Enum):
    WAIT = "wait"
    UNKNOWN = "unknown"
    """A participant whose liveness this node cannot tell yet might change who is in: it looks again."""
    BELOW_MIN = "below min"
    """Fewer than ``min_nodes`` live: the last call starts again once they are back (torch)."""


def choose_members(candidates: Sequence[Candidate], round_: int, settings: Settings, last_call_over: bool,
                   now: float) -> Sealing | LastCallFrom | NotYet:
    """Whether round ``round_`` seals now, with whom: ``max_nodes`` live participants at once (the
    last round's members first, then by arrival), or ``min_nodes`` or more once the last call has
    run from when the min-th of them arrived."""
    live = [candidate for candidate in candidates if candidate.seen.counts]
    if len(live) < settings.min_nodes:
        return NotYet.BELOW_MIN
    if len(live) < settings.max_nodes and not last_call_over:
        return NotYet.WAIT
    if any(candidate.seen is Seen.UNKNOWN for candidate in live):
        return NotYet.UNKNOWN  # in or out, and in what order: only a second look tells
    if len(live) < settings.max_nodes:
        since = sorted(live, key=lambda candidate: candidate.arrival)[settings.min_nodes - 1].since
        if now < since + settings.last_call_s:
            return LastCallFrom(since)
    if len(live) >= settings.max_nodes:
        live.sort(key=lambda candidate: (candidate.node.member_of != round_ - 1, candidate.arrival))
    chosen = live[:settings.max_nodes]
    ranks = ranks_of([candidate.node for candidate in chosen], round_ - 1)
    return Sealing([candidate.arrival for _, candidate in sorted(zip(ranks, chosen), key=lambda pair: pair[0])])


# --- a participant waiting for its round's seal ------------------------------------------------


@dataclass(frozen=True)
class ParticipantView:
    """What a participant read, and when, on its own clock."""

    now: float
    round_: int
    """The round it arrived at."""
    arrival: int
    open_round: int
    closed: bool
    seal: list[int] | None
    arrived: int
    withdrawn: int
    join_deadline: float
    present_since: float | None
    """When it first saw ``min_nodes`` present (arrived, not withdrawn), ever since; None: not now."""
    full_since: float | None
    """When it first saw ``max_nodes`` present, unsealed."""
    batch_before_gone: bool = False
    """Every node of the batch of watchers before this node's is silent or withdrawn, as it saw them."""
    tried_over: bool | None = None
    """Whether the last call was over when it last tried to seal, with the counts (arrived,
    withdrawn, dips) it sees now; None: it has not tried with these counts."""


@dataclass(frozen=True)
class Member:
    rank: int
    size: int


@dataclass(frozen=True)
class SealedWithout:
    """The round was sealed without this node: it waits outside."""


@dataclass(frozen=True)
class Superseded:
    """The job moved past this node's round while it was frozen: it arrives at the open one."""


@dataclass(frozen=True)
class Withdraw:
    closed: bool


@dataclass(frozen=True)
class TrySeal:
    last_call_over: bool


@dataclass(frozen=True)
class Wait:
    until: float


ParticipantAction = Member | SealedWithout | Superseded | Withdraw | TrySeal | Wait


def present(arrived: int, withdrawn: int) -> int:
    return arrived - withdrawn


def track_since(since: float | None, reached: bool, now: float) -> float | None:
    """When a condition seen now has held since (None: it does not hold)."""
    if not reached:
        return None
    return now if since is None else since


def seal_stagger(arrival: int, settings: Settings) -> float:
    """Participant ``arrival`` tries to seal this long after the first: one reads O(N), not all,
    and a dead first one never holds the round."""
    return settings.seal_stagger_s * min(arrival - 1, settings.seal_stagger_max)


def watches(arrival: int, batch_before_gone: bool, settings: Settings) -> bool:
    """Whether participant ``arrival`` watches the others' keys and tries to seal until it is
    sealed: the first ``watchers`` arrivals; each further batch of as many once it has seen every
    node of the batch before it silent or withdrawn (``batch_before_gone``). So a participant
    dead before the seal costs a few nodes O(N) reads, not every node."""
    return arrival <= settings.watchers or batch_before_gone


def batch_before(arrival: int, settings: Settings) -> range:
    """The arrival numbers of the batch of watchers before ``arrival``'s (empty for the first)."""
    batch = (arrival - 1) // settings.watchers
    return range(max(0, batch - 1) * settings.watchers + 1, batch * settings.watchers + 1)


def participant_action(view: ParticipantView, settings: Settings) -> ParticipantAction:
    if view.seal is not None:
        if view.arrival in view.seal:
            return Member(view.seal.index(view.arrival), len(view.seal))
        return SealedWithout()
    if view.open_round > view.round_:
        return Superseded()
    if view.closed:
        return Withdraw(closed=True)
    if view.now >= view.join_deadline:
        return Withdraw(closed=False)
    stagger = seal_stagger(view.arrival, settings)
    last_call = None if view.present_since is None else view.present_since + settings.last_call_s
    due = None if last_call is None else last_call + stagger
    over = due is not None and view.now >= due
    # The node whose arrival made the round full tries at once; the others if it stays unsealed
    # (a participant among max_nodes is dead: then the last call decides).
    full = view.full_since is not None and (view.arrival >= view.arrived or view.now >= view.full_since + stagger)
    # Tried with these counts: once more only if the last call was not over then and is now
    # (after BELOW_MIN the last call starts again: no try for every restart of it).
    tried = view.tried_over is not None and (view.tried_over or not over)
    if (full or over) and (not tried or watches(view.arrival, view.batch_before_gone, settings)):
        return TrySeal(last_call_over=over)
    later = [due, None if view.full_since is None else view.full_since + stagger]
    return Wait(min([view.join_deadline] + [at for at in later if at is not None and at > view.now]))


# --- a node waiting outside a sealed round ------------------------------------------------------


@dataclass(frozen=True)
class OutsideView:
    now: float
    sealed: int
    open_round: int
    closed: bool
    counted: bool
    deadline: float
    members: Sequence[Seen] | None
    """How it judged the sealed round's members, when it looked this time (None: it did not)."""


class Outside(Enum):
    CLOSED = "closed"
    NEXT_ROUND_OPEN = "next round open"
    TIMED_OUT = "timed out"
    OPEN_NEXT = "open the next round"
    """Every member is gone (a whole job started again against a store that outlived it)."""
    COUNT_ME = "count me"
    """A member is gone: off the redundancy list, onto the wait list (torch)."""
    WAIT = "wait"


def outside_action(view: OutsideView) -> Outside:
    if view.closed:
        return Outside.CLOSED
    if view.open_round > view.sealed:
        return Outside.NEXT_ROUND_OPEN
    if view.counted and view.now >= view.deadline:
        return Outside.TIMED_OUT
    if view.members is not None:
        gone = [seen for seen in view.members if not seen.counts]
        if view.members and len(gone) == len(view.members) and not any(seen is Seen.LEFT for seen in gone):
            return Outside.OPEN_NEXT
        if gone and not view.counted:
            return Outside.COUNT_ME
    return Outside.WAIT


# --- a node's turn at a reopened round ----------------------------------------------------------


@dataclass(frozen=True)
class TurnView:
    now: float
    started: float
    arrived: int
    """Arrivals at the reopened round so far."""
    ahead: int
    """Waiters that came before this one (``waiters_ahead``)."""
    members: Sequence[Seen]
    """The last round's members, judged by this node."""
    clear_since: float | None
    """Since when this node has seen no member still coming (``members_coming``); None: one is."""


def members_coming(members: Sequence[Seen], quiet: Sequence[float], settings: Settings) -> bool:
    """Whether a member of the last round that has not arrived at the next still beats (its key
    moved within 2 beats, on this node's clock, which reads it every half beat): it will come,
    once its workers have stopped."""
    return any(seen in (Seen.ALIVE, Seen.UNKNOWN) and unchanged < settings.keep_alive_s * 2
               for seen, unchanged in zip(members, quiet))


def waiters_ahead(came: int, ticket: int, places: Sequence[int | None]) -> int:
    """How many of a reopened round's waiters go before the one with ``ticket``: those that came
    to wait before it (``came``: a place a node takes once and keeps while it waits, round after
    round), not those that took a ticket for this round first (spares that a round left out take
    the next round's tickets in whatever order their threads run). ``places``: each ticket's
    place, None where not written yet: it goes before, as a dead waiter does until the grace."""
    return sum(1 for number, place in enumerate(places, 1) if number != ticket and (place is None or place < came))


def my_turn(view: TurnView, settings: Settings) -> bool:
    """Whether a waiter arrives at the reopened round now: at once where the round has a place for
    all; else it lets the last round's members come first: those that arrived, and those still
    beating while their workers stop, up to ``turn_limit_s`` (the keep-alive expiry and the grace). Then the waiters ahead of it, each in its turn: it waits until they
    arrived, or ``turn_grace_s`` (and a little more per waiter ahead) once no member is coming."""
    coming = sum(1 for seen in view.members if seen.counts or seen is Seen.LEFT)
    if coming + view.ahead < settings.max_nodes:
        return True  # a place for every member still there, every waiter ahead and this one: no turn to keep
    stagger = settings.seal_stagger_s * view.ahead
    if view.now - view.started >= settings.turn_limit_s + stagger:
        return True
    if view.clear_since is None:
        return False
    left = sum(1 for seen in view.members if seen is Seen.LEFT)
    return view.arrived >= left + view.ahead or view.now - view.clear_since >= settings.turn_grace_s + stagger


# --- a member counting who waits for it ---------------------------------------------------------


def waiting_count(waiters: Sequence[tuple[Seen, bool]], arrivals: Sequence[Seen]) -> int:
    """``num_nodes_waiting`` of a member: live counted waiters (``(seen, counted)``) and live
    arrivals at the next round (a member that rendezvoused again among them)."""
    return sum(1 for seen, counted in waiters if counted and seen.counts) + sum(1 for seen in arrivals if seen.counts)

"""Many arrival-rendezvous nodes over one in-memory store, on a simulated clock.

Each node is the real ``ArrivalRendezvous``: its ``joining`` generator yields its waits, and this
simulation decides when each wait ends; its keep-alive is a stand-in that beats on the simulated
clock. Store calls are atomic, and the nodes take turns only where they wait, in an order drawn
from a seeded random generator. Around the nodes, an agent as torch's: a member asks
``num_nodes_waiting`` every second and rendezvouses again when it is not 0, or when a fault
reached its round (a peer killed: at once; frozen: the watchdog's verdict), after stopping its
workers for a while. Faults are real to the rendezvous: a killed node stops everything, a frozen
one stops everything until it thaws. Each node's monotonic clock has an offset of its own.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch.distributed.elastic.rendezvous import RendezvousError

from torchx_ext.launcher.rendezvous.arrivals import ArrivalRendezvous, Pause
from torchx_ext.launcher.rendezvous.core import WITHDRAWN

KEEP_ALIVE_S = 1.0
MISSES = 3
EXPIRY_S = KEEP_ALIVE_S * MISSES
LAST_CALL_S = 2.0
MONITOR_S = 1.0
WATCHDOG_S = 4.0
"""How long the survivors of a frozen node take to act on it (the watchdog's peer timeout)."""
PREFIX = "torchx_ext.rdzv/job/"


class SimStore:
    """A c10d store in memory, with the calls the rendezvous makes; it tells the simulation of writes."""

    def __init__(self, on_write: Callable[[str, str], None], on_add: Callable[[str, int, int], None],
                 on_read: Callable[[list[str]], None] = lambda keys: None) -> None:
        self.data: dict[str, bytes] = {}
        self._on_write, self._on_add, self._on_read = on_write, on_add, on_read

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value
        self._on_write(key, self.data[key].decode())

    def get(self, key: str) -> bytes:
        self._on_read([key])
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        self._on_add(key, amount, value)
        return value

    def check(self, keys: list[str]) -> bool:
        return all(key in self.data for key in keys)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        self._on_read([key])
        current = self.data.get(key)
        if (current is None and expected == "") or (current is not None and current == expected.encode()):
            self.set(key, desired)
            return desired.encode()
        return current if current is not None else expected.encode()

    def multi_get(self, keys: list[str]) -> list[bytes]:
        self._on_read(keys)
        return [self.data[key] for key in keys]

    def multi_set(self, keys: list[str], values: list[str]) -> None:
        for key, value in zip(keys, values):
            self.set(key, value)

    def delete_key(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    def list_keys(self) -> list[str]:
        return list(self.data)

    def clone(self) -> "SimStore":
        return self


class SimKeepAlive:
    """``KeepAlive``'s interface, beating on the simulated clock."""

    def __init__(self, store: Any, interval_s: float) -> None:
        self.store, self.interval_s = store, interval_s
        self.key: str | None = None
        self.value: Callable[[int], str] = str
        self.wake_key: str | None = None
        self.next_beat = 0.0
        self.wake_time: float | None = None
        self.count = 0
        self.stopped = False
        self.expected: str | None = None
        self.gone = False
        self.now: Callable[[], float] = lambda: 0.0  # the simulation's time, set by it

    def beat(self, key: str | None, value: Callable[[int], str] | None = None, wake_key: str | None = None,
             written: bool = False) -> None:
        same = key == self.key
        self.key, self.wake_key, self.wake_time = key, wake_key, None
        if value is not None:
            self.value = value
        if written:
            self.expected, self.gone = self.value(0), False
        elif not same:
            self.expected, self.gone = None, False
        self.next_beat = self.now() + (self.interval_s if written else 0.0)

    def wake_at(self, monotonic: float | None) -> None:
        self.wake_time = monotonic  # on the node's clock: the simulation converts

    def stop(self) -> None:
        self.stopped = True

    def due(self) -> float | None:
        if self.stopped or (self.key is None and self.wake_key is None):
            return None
        return self.next_beat

    def fire(self) -> None:
        if self.key is not None:  # as ``KeepAlive``: a compare-and-set of what it wrote last
            self.count += 1
            new = self.value(self.count)
            if self.expected is None:
                self.store.set(self.key, new)
                self.expected = new
            elif self.store.compare_set(self.key, self.expected, new) == new.encode():
                self.expected, self.gone = new, False
            else:
                self.gone = True
        if self.wake_key is not None and not self.gone:
            self.store.set(self.wake_key, "")
        self.next_beat = self.now() + self.interval_s


@dataclass
class SimNode:
    name: str
    node_rank: int
    start_at: float
    offset: float
    stop_delay: float
    join_timeout_s: float
    rdzv: ArrivalRendezvous | None = field(default=None, repr=False)
    keep_alive: SimKeepAlive | None = field(default=None, repr=False)
    state: str = field(default="idle", repr=False)  # idle, joining, member, dead, exited
    frozen_until: float | None = field(default=None, repr=False)
    steps: Any = field(default=None, repr=False)
    pause: Pause | None = field(default=None, repr=False)
    woken_at: float | None = field(default=None, repr=False)
    round: int | None = field(default=None, repr=False)
    rank: int | None = field(default=None, repr=False)
    next_poll: float = field(default=0.0, repr=False)
    rejoin_at: float | None = field(default=None, repr=False)
    died_at: float | None = field(default=None, repr=False)
    frozen_at: float | None = field(default=None, repr=False)
    rounds: dict[int, int] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:  # what a falsifying example needs to be run again
        return (f"SimNode({self.name!r}, {self.node_rank}, start_at={self.start_at}, offset={self.offset}, "
                f"stop_delay={self.stop_delay}, join_timeout_s={self.join_timeout_s})")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    @property
    def live(self) -> bool:
        return self.state not in ("dead", "exited")


@dataclass
class Fault:
    at: float
    kind: str  # kill, freeze
    victim: int
    lasts: float = 0.0


@dataclass
class SealRecord:
    round: int
    at: float
    arrivals: list[int]
    owners: list[SimNode]
    withdrawn: bool
    """Whether a member had withdrawn when the round was sealed."""
    gone_for: float
    """The longest a member had been dead or frozen when the round was sealed."""


class Simulation:
    def __init__(self, nodes: list[SimNode], min_nodes: int, max_nodes: int, faults: list[Fault], seed: int,
                 last_call_s: float = LAST_CALL_S) -> None:
        self.now = 0.0
        self.last_call_s = last_call_s
        self.rng = random.Random(seed)
        self.nodes = nodes
        self.min_nodes, self.max_nodes = min_nodes, max_nodes
        self.faults = sorted(faults, key=lambda fault: fault.at)
        self.store = SimStore(self._on_write, self._on_add, self._on_read)
        self.running: SimNode | None = None
        self.node_keys_read: dict[str, int] = {}
        """Per node: how many participants' and members' keys it read (a key a read)."""
        self.arrived_at: dict[tuple[int, int], float] = {}
        self.owners: dict[tuple[int, int], SimNode] = {}
        self.seals: list[SealRecord] = []
        self.present: dict[int, list[tuple[float, int]]] = {}
        """Per round: (time, arrived - withdrawn) at each change."""
        self.restarts_asked = 0
        self.events = 0

    # --- what the store tells -----------------------------------------------------------------

    def _on_write(self, key: str, value: str) -> None:
        for node in self.nodes:
            if node.pause is not None and node.pause.wake is not None and PREFIX + node.pause.wake == key:
                if node.woken_at is None:
                    node.woken_at = self.now + self.rng.uniform(0, 0.01)
        match = re.fullmatch(re.escape(PREFIX) + r"r(\d+)\.seal", key)
        if match:
            round_ = int(match.group(1))
            arrivals = [int(a) for a in value.strip("[]").split(",") if a.strip()]
            owners = [self.owners[(round_, a)] for a in arrivals]
            withdrawn = any(self.store.data.get(f"{PREFIX}r{round_}.node.{a}") == WITHDRAWN.encode() for a in arrivals)
            gone_for = [self.now - (owner.died_at if owner.died_at is not None else
                                    owner.frozen_at if owner.frozen_at is not None else self.now)
                        for owner in owners]
            self.seals.append(SealRecord(round_, self.now, arrivals, owners, withdrawn, max(gone_for, default=0.0)))

    def _on_read(self, keys: list[str]) -> None:
        if self.running is not None:
            count = sum(1 for key in keys if re.fullmatch(re.escape(PREFIX) + r"r\d+\.node\.\d+", key))
            self.node_keys_read[self.running.name] = self.node_keys_read.get(self.running.name, 0) + count

    def _on_add(self, key: str, amount: int, value: int) -> None:
        match = re.fullmatch(re.escape(PREFIX) + r"r(\d+)\.(arrivals|withdrawn)", key)
        if match is None or amount == 0:
            return
        round_ = int(match.group(1))
        if match.group(2) == "arrivals":
            assert self.running is not None
            self.owners[(round_, value)] = self.running
            self.arrived_at[(round_, value)] = self.now
        arrived = int(self.store.data.get(f"{PREFIX}r{round_}.arrivals", b"0"))
        withdrawn = int(self.store.data.get(f"{PREFIX}r{round_}.withdrawn", b"0"))
        self.present.setdefault(round_, []).append((self.now, arrived - withdrawn))

    # --- the nodes ----------------------------------------------------------------------------

    def _make(self, node: SimNode) -> None:
        keep_alive = SimKeepAlive(None, KEEP_ALIVE_S)
        keep_alive.now = lambda: self.now  # its own schedule, on the simulation's time

        def make_keep_alive(store: Any, interval_s: float) -> SimKeepAlive:
            keep_alive.store = store
            return keep_alive

        node.keep_alive = keep_alive
        node.rdzv = ArrivalRendezvous(self.store, "job", self.min_nodes, self.max_nodes,
                                      join_timeout_s=node.join_timeout_s, last_call_s=self.last_call_s,
                                      node_rank=node.node_rank, local_addr=node.name, keep_alive_s=KEEP_ALIVE_S,
                                      keep_alive_misses=MISSES, clock=lambda: self.now + node.offset,
                                      keep_alive=make_keep_alive)

    def _start(self, node: SimNode) -> None:
        self._make(node)
        self._join(node)

    def _join(self, node: SimNode) -> None:
        assert node.rdzv is not None
        node.state, node.round, node.rank, node.rejoin_at = "joining", None, None, None
        node.steps = node.rdzv.joining()
        self._step(node, first=True)

    def _step(self, node: SimNode, first: bool = False) -> None:
        self.running = node
        try:
            node.pause = next(node.steps) if first else node.steps.send(None)
            node.woken_at = None
            if node.pause.wake is not None and PREFIX + node.pause.wake in self.store.data:
                node.woken_at = self.now
        except StopIteration as done:
            node.pause, node.steps = None, None
            node.round, node.rank, _ = done.value
            node.rounds[node.round] = node.rank
            node.state, node.next_poll = "member", self.now + MONITOR_S
            assert node.rdzv is not None
            node.rdzv.join_timeout_s = 600.0  # a node drawn to give up does so on its first join only
        except RendezvousError:
            node.pause, node.steps, node.state = None, None, "exited"
            assert node.keep_alive is not None
            node.keep_alive.stop()
        finally:
            self.running = None

    def _resume(self, node: SimNode) -> None:
        assert node.pause is not None and node.rdzv is not None
        if node.pause.wake is not None:  # as ``join``'s driver: the wait ends, its key goes
            node.rdzv.store.delete_key(node.pause.wake)
            assert node.keep_alive is not None
            node.keep_alive.wake_time = None  # a keep-alive wakes once at a deadline
        self._step(node)

    def _resume_time(self, node: SimNode) -> float:
        assert node.pause is not None
        until = node.pause.until - node.offset + 1e-9  # the node's clock to the simulation's (and past rounding)
        if node.pause.wake is None:
            return until
        assert node.keep_alive is not None
        times = [until] + ([node.woken_at] if node.woken_at is not None else [])
        return min(times)  # (the keep-alive's wake at ``until`` is this)

    def _poll(self, node: SimNode) -> None:
        assert node.rdzv is not None
        node.next_poll = self.now + MONITOR_S
        if node.rejoin_at is not None:
            return
        if node.rdzv.num_nodes_waiting() > 0:
            self.restarts_asked += 1
            node.rejoin_at = self.now + node.stop_delay
        elif self._peer_lost(node):  # a worker failed on a dead peer, or the watchdog's verdict
            node.rejoin_at = self.now + node.stop_delay

    def _peer_lost(self, node: SimNode) -> bool:
        seal = next((seal for seal in reversed(self.seals) if seal.round == node.round), None)
        for peer in seal.owners if seal is not None else []:
            if peer.died_at is not None and self.now - peer.died_at >= 1.0:
                return True
            if peer.frozen_at is not None and self.now - peer.frozen_at >= WATCHDOG_S:
                return True
        return False

    # --- faults -------------------------------------------------------------------------------

    def _fault(self, fault: Fault) -> None:
        victim = self.nodes[fault.victim]
        if not victim.live or victim.frozen_until is not None or victim.state == "idle":
            return
        if fault.kind == "kill":  # its round's members notice at their next poll (``_peer_lost``)
            victim.state, victim.died_at, victim.pause, victim.steps = "dead", self.now, None, None
            assert victim.keep_alive is not None
            victim.keep_alive.stop()
        else:
            victim.frozen_until, victim.frozen_at = self.now + fault.lasts, self.now

    def _thaw(self, node: SimNode) -> None:
        node.frozen_until, node.frozen_at = None, None
        latest = max((seal.round for seal in self.seals), default=-1)
        if node.state == "member" and node.round != latest and node.rejoin_at is None:
            node.rejoin_at = self.now + node.stop_delay  # its workers' peers are gone: it restarts

    # --- the loop -----------------------------------------------------------------------------

    def _next(self) -> tuple[float, Callable[[], None]] | None:
        best: tuple[float, Callable[[], None]] | None = None

        def offer(when: float | None, action: Callable[[], None]) -> None:
            nonlocal best
            if when is not None and (best is None or when < best[0]):
                best = (max(when, self.now), action)

        if self.faults:
            fault = self.faults[0]
            offer(fault.at, lambda: self._fault(self.faults.pop(0)))
        for node in self.nodes:
            if not node.live:
                continue
            if node.frozen_until is not None:
                offer(node.frozen_until, lambda node=node: self._thaw(node))  # type: ignore[misc]
                continue
            if node.state == "idle":
                offer(node.start_at, lambda node=node: self._start(node))  # type: ignore[misc]
                continue
            assert node.keep_alive is not None
            offer(node.keep_alive.due(), node.keep_alive.fire)
            if node.state == "joining" and node.pause is not None:
                offer(self._resume_time(node), lambda node=node: self._resume(node))  # type: ignore[misc]
            if node.state == "member":
                offer(node.next_poll, lambda node=node: self._poll(node))  # type: ignore[misc]
                offer(node.rejoin_at, lambda node=node: self._join(node))  # type: ignore[misc]
        return best

    def run(self, until: float) -> None:
        while True:
            upcoming = self._next()
            if upcoming is None or upcoming[0] > until:
                self.now = until
                return
            self.now = upcoming[0]
            upcoming[1]()
            self.events += 1
            assert self.events < 500_000, "the simulation does not settle"

"""The launcher's watchdog: a peer that froze or dropped off the network is noticed in seconds.

While workers train, torch's c10d rendezvous looks at its members' keep-alives only during a
rendezvous (pytorch/pytorch#111646), and gloo and NCCL wait 30 and 10 minutes in a collective
whose peer went silent: a frozen host or a cut link sends no connection reset. So every agent
beats a counter of its own in the rendezvous store and watches its two ring neighbours'
counters on its own monotonic clock (no clocks are compared between hosts; each agent does the
same work at any scale). A neighbour whose counter has not moved for ``timeout`` seconds is
lost, and so is the store when it has not answered for as long. The first agent to notice a
loss writes it to the store, so every agent acts on it, not only the neighbours, and at once: each
agent waits for its own wake key on a connection of its own (a wait the store server answers, no
polling), and the agent that notices sets every agent's in one ``multi_set`` (each neighbour of
the lost node may). Each agent also reads the loss once a timeout itself, in case its listener's
idle connection was dropped on the way. Each agent's load stays constant in N while nothing is
lost; an agent that notices a loss writes N short keys once.

A TCPStore client waits forever on a host that stopped without closing the connection (its own
timeout did not end a ``get`` on a SIGSTOPped store here), so the store calls run on a thread
of their own and the judge, which touches no socket, decides alone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from dataclasses import dataclass
from typing import Any

from torchx_ext.errors import first_line
from torchx_ext.replica_env import REPLICA_ENV

logger = logging.getLogger("torchx_ext.launcher")

DEFAULT_TIMEOUT_S = 10.0
"""A peer silent this long is lost. Beats come from the agent, not the workers, so a long step,
a slow import or a busy CPU does not delay them; 10 s is five missed beats."""
BEATS_PER_TIMEOUT = 5
NEIGHBOURS = 2
KEY_PREFIX = "torchx_ext.watchdog"
LISTEN_FOR = timedelta(days=1)
"""How long one wait of the listener lasts. A loss or the round's end ends it sooner; in a round
that trains longer, the listener waits again (the key, once set, stays: a loss declared in between
ends the next wait at once)."""


@dataclass(frozen=True)
class Loss:
    """What the watchdog declared lost, in the one line the launcher prints."""

    line: str
    of_store: bool
    of_stuck_job: bool = False
    """The store was lost as this node stopped restarting with its job (the line says why)."""


def watched_ranks(rank: int, world_size: int) -> list[int]:
    """The ring neighbours that ``rank`` watches: the next two ranks, wrapping around."""
    count = min(NEIGHBOURS, world_size - 1)
    return [(rank + step) % world_size for step in range(1, count + 1)]


class Judge:
    """Decides from what the store answered, and when, whether a peer or the store is lost.

    Pure: every method takes the current monotonic time, so tests drive it with their own clock.
    """

    def __init__(self, watched: Iterable[int], timeout_s: float, now: float) -> None:
        self.timeout_s = timeout_s
        self._moved_at = {rank: now for rank in watched}
        self._counts: dict[int, int] = {}
        self._answered_at = now

    def restart(self, now: float) -> None:
        """Count every silence from ``now``: what was measured before does not count."""
        self._answered_at = now
        self._moved_at = {rank: now for rank in self._moved_at}

    def store_answered(self, now: float) -> None:
        self._answered_at = now

    def saw(self, rank: int, count: int, now: float) -> None:
        if self._counts.get(rank) != count:
            self._counts[rank] = count
            self._moved_at[rank] = now

    def silent_store(self, now: float) -> float | None:
        """Seconds the store has been silent, once that is longer than the timeout."""
        silent = now - self._answered_at
        return silent if silent > self.timeout_s else None

    def silent_peer(self, now: float) -> tuple[int, float] | None:
        """The peer silent longest and for how long, once that is longer than the timeout.
        A silent store silences every peer: ask ``silent_store`` first."""
        if not self._moved_at:
            return None
        rank, moved_at = min(self._moved_at.items(), key=lambda item: item[1])
        silent = now - moved_at
        return (rank, silent) if silent > self.timeout_s else None


def node_name() -> str:
    """How this agent is named in a loss line: its host, and its pid where hosts are shared."""
    replica = os.environ.get(REPLICA_ENV)  # local_cwd's replicas share a host name
    where = f"replica {replica} on " if replica else ""
    return f"{where}host {socket.gethostname()}, launcher pid {os.getpid()}"


class RoundWatch:
    """Beats and watches for one rendezvous round: from its start until ``stop``.

    ``store`` is the round's store (torch's rendezvous store, prefixed per round), so a round's
    counters never mix with another's. ``on_loss`` is called once, from the judge's thread.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        timeout_s: float,
        on_loss: Callable[[Loss], None],
        store_name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._round_store = store
        self._store: Any = None  # a client of its own, made by the beat thread (connecting may hang)
        self._rank = rank
        self._watched = watched_ranks(rank, world_size)
        self._interval = timeout_s / BEATS_PER_TIMEOUT
        self._on_loss = on_loss
        self._store_name = store_name
        self._clock = clock
        self._judge = Judge(self._watched, timeout_s, clock())
        self._names: dict[int, str] = {}
        self._reported: str | None = None  # a loss another agent wrote to the store
        self._loss: Loss | None = None
        self._store_only = False
        self._world_size = world_size
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._woken = threading.Event()  # the judge looks now: stopped, or a loss was reported
        self._threads = [
            threading.Thread(target=self._beat, name="torchx_ext watchdog: beat", daemon=True),
            threading.Thread(target=self._watch, name="torchx_ext watchdog: judge", daemon=True),
            threading.Thread(target=self._listen, name="torchx_ext watchdog: listen", daemon=True),
        ]

    def start(self) -> RoundWatch:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop judging at once; a beat stuck in a store call ends with the process. The beat
        thread then ends the listener's wait."""
        self._stopped.set()
        self._woken.set()

    def join(self, timeout_s: float) -> None:
        """Wait, ``timeout_s`` at most in all, for this stopped watch's threads to end (a beat stuck
        in a call to a store that stopped answering may not): so that none returns from a store
        call while the interpreter finalizes, which aborts the process."""
        until = time.monotonic() + timeout_s
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.0, until - time.monotonic()))

    def ended(self) -> bool:
        return not any(thread.is_alive() for thread in self._threads)

    def loss(self) -> Loss | None:
        with self._lock:
            return self._loss

    def judge_store_only(self) -> None:
        """Stop judging peers but keep judging the store: while the agent re-rendezvouses or shuts
        down after a loss, a store that stops answering would hang it for good."""
        with self._lock:
            self._store_only = True

    def _beat(self) -> None:
        from torch.distributed import PrefixStore

        beats = 0
        failed = False
        while not self._stopped.is_set():
            try:
                if self._store is None:
                    # Its own connection: a TCPStore client holds its connection while it waits for a
                    # key (the agent's exit barrier, up to 300 s), and beats must not queue behind that.
                    store = PrefixStore(KEY_PREFIX, self._round_store.clone())
                    store.set(f"name.{self._rank}", node_name())
                    self._store = store
                beats += 1
                self._beat_once(self._store, beats)
                if failed:
                    logger.warning("peer watchdog: this node reaches the rendezvous store again")
                    failed = False
            except Exception as error:
                # This node's own trouble (a connection that cannot be opened, or one that broke): no
                # peer is judged on it. Tried again on a new connection (a TCPStore client never
                # reconnects); a store that stays silent is the judge's to call lost.
                self._store = None
                if not failed:
                    logger.warning("peer watchdog: this node's connection to the rendezvous store at %s failed, "
                                   "trying again every %.1f s: %s", self._store_name, self._interval, first_line(error))
                failed = True
            self._stopped.wait(self._interval)
        try:
            if self._store is not None:
                self._store.set(f"wake.{self._rank}", "")  # this round's watch is over: so is the listener's wait
        except Exception as error:  # the listener's wait ends with the process
            logger.debug("watchdog: ending the listener's wait failed: %s", error)

    def _beat_once(self, store: Any, beats: int) -> None:
        store.add(f"beat.{self._rank}", 1)
        counts = {rank: store.add(f"beat.{rank}", 0) for rank in self._watched}
        for rank in self._watched:
            if rank not in self._names and store.check([f"name.{rank}"]):
                self._names[rank] = store.get(f"name.{rank}").decode()
        # Once a timeout, the loss itself: the listener's idle connection may have been
        # dropped on the way (a NAT's or a proxy's idle timeout) without a word.
        reported = (store.get("lost").decode() if beats % BEATS_PER_TIMEOUT == 0 and store.check(["lost"])
                    else None)
        now = self._clock()
        with self._lock:
            self._judge.store_answered(now)
            for rank, count in counts.items():
                self._judge.saw(rank, count, now)
            self._reported = self._reported or reported
        if reported is not None:
            self._woken.set()

    def _listen(self) -> None:
        """Wait until this agent's wake key is set: by the agent that noticed a loss, or by this
        one's beat thread once the watch stops. The wait runs in the store server and holds no
        lock here."""
        from torch.distributed import PrefixStore

        store: Any = None
        while not self._stopped.is_set():
            try:
                store = store or PrefixStore(KEY_PREFIX, self._round_store.clone())
                store.wait([f"wake.{self._rank}"], LISTEN_FOR)
                if self._stopped.is_set():
                    return
                reported = store.get("lost").decode()
            except Exception as error:  # a wait of a day ended, or the store is gone (the judge tells)
                logger.debug("watchdog: listening for a loss: %s", error)
                store = None  # waited again on a new connection: a broken one never reconnects
                self._stopped.wait(self._interval)
                continue
            with self._lock:
                self._reported = self._reported or reported
            self._woken.set()
            return

    def _watch(self) -> None:
        # A lost peer is the agent's to act on, from its loop; that loop may then be stuck in a
        # call to a store that stopped too (a frozen store host is also a silent peer, often
        # noticed first), so the store stays judged until this round's watch stops.
        woke = self._clock()
        while not self._stopped.is_set():
            self._woken.wait(self._interval)
            if self._stopped.is_set():
                return
            self._woken.clear()
            now, slept = self._clock(), self._clock() - woke
            woke = now
            with self._lock:
                if slept > self._judge.timeout_s / 2:
                    # This process was frozen itself (SIGSTOP, a paused VM or container): the
                    # silence it measured is its own. Everyone gets a fresh start.
                    self._judge.restart(now)
                    continue
                loss = self._verdict(now)
                if loss is None or (self._loss is not None and not loss.of_store):
                    continue
                self._loss = loss
                first = loss.line != self._reported
            store = self._store
            if first and not loss.of_store and store is not None:
                # On a thread of its own: the judge never waits on the store.
                threading.Thread(target=self._declare, args=(store, loss.line), daemon=True).start()
            self._on_loss(loss)
            if loss.of_store:
                return

    def _declare(self, store: Any, line: str) -> None:
        """Write the loss for every agent, then wake them all (the line first: a woken listener
        reads it)."""
        try:
            store.set("lost", line)
        except Exception as error:  # the judge tells a store that stopped answering
            logger.debug("watchdog: writing the loss failed: %s", error)
            return
        others = [rank for rank in range(self._world_size) if rank != self._rank]
        try:
            store.multi_set([f"wake.{rank}" for rank in others], [""] * len(others))
        except Exception as error:  # the store is gone: the listeners' waits end with the process
            logger.debug("watchdog: waking %d agents failed: %s", len(others), error)

    def _verdict(self, now: float) -> Loss | None:
        timeout = self._judge.timeout_s
        silent = self._judge.silent_store(now)
        if silent is not None:
            return Loss(
                f"lost the rendezvous store at {self._store_name}: it has not answered for {silent:.1f} s "
                f"(peer timeout {timeout:g} s)",
                of_store=True,
            )
        if self._store_only:
            return None
        if self._reported is not None:
            return Loss(self._reported, of_store=False)
        peer = self._judge.silent_peer(now)
        if peer is None:
            return None
        rank, silent = peer
        name = self._names.get(rank, "name unknown: it never beat")
        return Loss(
            f"lost node {rank} ({name}): silent for {silent:.1f} s (peer timeout {timeout:g} s)",
            of_store=False,
        )

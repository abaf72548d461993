"""The hang watchdog's threads: look at this node's ranks and the job's counter, and act on a hang.

One ``HangWatch`` per rendezvous round (``watched.py`` starts it with the round and stops
it when the next begins), on a thread of its own that every ``look_interval``:

- reads this node's workers' progress files (``worker_progress.py``) and adds 1 to the round's
  ``moves`` counter if any rank moved since the last look (a rank inside a block timed with
  torch's ``expires`` counts as moving), reading the job's count back in the same operation;
- hands the count to ``HangJudge`` (``hang_core.py``), which decides on this node's own clock;
- writes the first error line a worker of this node left (``worker_progress.mark_failed``) to the
  round's store as soon as it sees one, and the round's first end (``FIRST_END``): a failure that
  came before any hang gives its node's agent another timeout to end the round, and every node
  counts the attempt as failed, however long the failed worker takes to exit.

A node that decides writes the hang's line to the round's store first (one line for the whole job:
the first node's) and every node, having seen it, writes its ranks' stacks into its log and adds
its acknowledgement. Each waits, ``ACK_BOUND_S`` at most, until every node has, and only then lets
its agent stop the workers (``hang()``), so no rank is killed before every stack was taken. A
worker's own timer (``step_timer.py``) declares the same way, from the timer's thread.

A one-node job keeps its count in memory. The store calls run on this thread: a store that stops
answering stops the watch, and the peer watchdog (``watchdog.py``) tells that loss.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchx_ext.errors import first_line
from torchx_ext.launcher.hang_core import MAX_LOOK_S, HangJudge, StuckAttempts, look_interval
from torchx_ext.launcher.stacks import STACK_BOUND_S, local_ranks, write_stacks
from torchx_ext.launcher.rendezvous.watchdog import node_name

logger = logging.getLogger("torchx_ext.launcher")

KEY_PREFIX = "torchx_ext.hang/"
HANG, TIMER = "hang", "timer"
"""The kinds of declaration: the watchdog's (every node restarts its workers), or a worker's timer
(its node's worker is killed; the rendezvous restarts the others)."""
STOPPED = "stopped"
"""The key of a node that stopped restarting because its attempts kept hanging or failing at one
point (every node stops with it: it never joins the next round, which they would wait for). A key
of its own: the round's declaration is often the hang that ended the attempt."""
FIRST_END = "first_end"
"""The key of the round's first end: ``FAILED_FIRST`` (a worker's code failed; its node writes it as
soon as its look sees the error) or ``HANG_FIRST`` (written before a hang is declared), whichever a
node wrote first. Every node counts the attempt by it, so they agree on how it ended even when a
failed worker is slow to exit and the stillness after it reaches the hang timeout."""
FAILED_FIRST, HANG_FIRST = "failed", "hang"
FAILURE_CALL_S = 5.0
"""How long a store call that tells a failed attempt may take (its host frozen: not told)."""
STOP_SEEN_BOUND_S = 2 * MAX_LOOK_S + 2.0
"""How long a node that stops restarting waits, as it leaves, for every node to have seen the stop
(each looks every 2 s at most, or finds the rendezvous closed): the store's host leaving first would
end the others as a lost store, and each node judges "the same point" by its own looks, so a node
that is one attempt behind would otherwise fail on the closed rendezvous, which a scheduler retries."""
ACK_BOUND_S = STACK_BOUND_S + 2 * 2.0 + 1.0
"""How long a node waits for every node's stacks: theirs (3 s at most) once they looked (every 2 s
at most), twice over for a node that looked just before the declaration, and a second to spare."""
RESTART_STALL_S = 10.0
"""A worker of this node failed this long ago and its launcher has not rendezvoused again (torch's
agent stops the workers first, in a second or two): the launcher's own stacks go to its log, once.
A restart in place that took 29 s on a loaded CI machine left nothing to say where it waited."""


@dataclass
class LaunchProgress:
    """What the hang watchdog keeps for one launch, across its rounds."""

    directory: str
    timeout_s: float
    timed: Callable[[], bool] = lambda: False
    """Whether a worker of this node is inside a block timed with torch's ``expires`` (step_timer)."""
    serves_timer: bool = False
    """Whether this launcher serves torch's file timer: its declarations need a watch even when off."""
    stuck: StuckAttempts = field(default_factory=StuckAttempts)
    ledger: str | None = None
    """Where ``stuck`` is kept for this replica's next launcher (a scheduler's restart): beside its
    error file, which our schedulers keep per replica; None: in this process only."""
    watch: HangWatch | None = None
    """The current round's watch, for the timer's declarations."""

    @staticmethod
    def of_replica(directory: str, timeout_s: float, error_file: str | None) -> LaunchProgress:
        """The launch's progress, with the attempts this replica's launchers before it left."""
        ledger = f"{error_file}.attempts" if error_file else None
        stuck = StuckAttempts()
        if ledger is not None:
            try:
                with open(ledger, encoding="utf-8") as kept:
                    stuck = StuckAttempts.from_text(kept.read())
            except OSError:
                pass  # the replica's first launcher
        return LaunchProgress(directory, timeout_s, stuck=stuck, ledger=ledger)

    def attempt_ended(self, how: str | None, moved_looks: int, failure: str = "") -> bool:
        """Count an attempt that ended: ``HUNG``, ``FAILED`` (``failure``: its first error line) or
        otherwise (None); whether restarting is now pointless."""
        if how is None:
            self.stuck.ended_otherwise()
        else:
            self.stuck.ended_at_a_point(how, moved_looks, failure)
        if self.ledger is not None:
            try:
                partial = f"{self.ledger}.{os.getpid()}"
                with open(partial, "w", encoding="utf-8") as kept:
                    kept.write(self.stuck.to_text())
                os.replace(partial, self.ledger)
            except OSError as error:  # a read-only place: the count holds for this launcher only
                logger.debug("hang watch: could not keep the attempts at %s: %s", self.ledger, error)
        return self.stuck.stuck()


def take_failures(directory: str) -> list[str]:
    """The error lines this node's workers left since the last call (``worker_progress.mark_failed``),
    the first written first (the root cause: a peer's reset comes after), removed as they are read:
    the next attempt starts with none."""
    lines = []
    for path in _failure_files(directory):
        try:
            with open(path, encoding="utf-8", errors="replace") as failed:
                lines.append(failed.read().strip())
            os.unlink(path)
        except OSError:
            continue
    return lines


def first_failure(directory: str) -> str | None:
    """The first error line this node's workers left in this attempt, left in place; None: none yet."""
    for path in _failure_files(directory):
        try:
            with open(path, encoding="utf-8", errors="replace") as failed:
                return failed.read().strip()
        except OSError:
            continue
    return None


def _failure_files(directory: str) -> list[str]:
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".failed"):
                    found.append((entry.stat().st_mtime_ns, entry.path))
    except OSError:
        return []
    return [path for _, path in sorted(found)]


_registered: list[LaunchProgress] = []


def register(progress: LaunchProgress | None) -> None:
    """Make ``progress`` the launch's (None: no watchdog), for the handlers its rendezvous creates."""
    _registered[:] = [] if progress is None else [progress]


def registered() -> LaunchProgress | None:
    return _registered[0] if _registered else None


class HangWatch:
    """Looks for a hang in one round, from ``start`` until ``stop``."""

    def __init__(self, progress: LaunchProgress, store: Any, world_size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._progress = progress
        self._round_store = store if world_size > 1 else None
        self._store: Any = None
        self._world_size = world_size
        self._clock = clock
        self._interval = look_interval(progress.timeout_s) if progress.timeout_s > 0 else 1.0
        self._judge = HangJudge(progress.timeout_s)
        self._local_count = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._answered = False
        self._hang: str | None = None
        self._stuck: str | None = None
        self._saw_the_stop = False
        self.failed_here = False
        """Whether a worker of this node failed in this round (``failure``): torch's agent spent a
        restart on it."""
        self.ended_hung = False
        """Whether this round ended in a hang, the watchdog's or a timer's (a restart then counts
        towards ``StuckAttempts``)."""
        self._first: str | None = None
        """The round's first end (``FIRST_END``), once this node knows it."""
        self._postponed = False
        self.seen_failure = ""
        """The error line of the failure that came first in this round, once this node knows it."""
        self._told_unconnected = False
        self._failure_seen_at: float | None = None
        """When this node's look first found a worker's failure, until the round's end (``stop``)."""
        self._told_stall = False
        self._thread = threading.Thread(target=self._look, name="torchx_ext: hang watch", daemon=True)

    def start(self) -> HangWatch:
        self._progress.watch = self
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._progress.watch is self:
            self._progress.watch = None

    def join(self, timeout_s: float) -> None:
        """Wait, ``timeout_s`` at most, for the stopped watch's thread to end (a store call that
        returns while the interpreter finalizes aborts the process)."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def hang(self) -> str | None:
        """The line of a hang whose stacks every node has written (or that waited its bound)."""
        with self._lock:
            return self._hang

    @property
    def moved_looks(self) -> int:
        with self._lock:
            return self._judge.moved_looks

    def stuck_elsewhere(self) -> str | None:
        """The line of another node that stopped restarting in this round (``declare_stuck``)."""
        with self._lock:
            return self._stuck

    def declare_stuck(self, line: str) -> None:
        """This node stops restarting (after ``stop``): every other node is told, on its next look
        or when it reads the stop (``read_stuck``)."""
        if self._store is None:
            return
        try:
            self._store.compare_set(STOPPED, "", line)
            self._acknowledge_the_stop()
        except Exception as error:  # the store's loss: the others tell this node's loss
            logger.debug("hang watch: store call failed: %s", error)

    def read_stuck(self) -> str | None:
        """Another node's stop in this round, read from the round's store now (this node's look may
        have ended, or it left for the next round), acknowledged; None when there is none."""
        with self._lock:
            if self._stuck is not None or self._store is None:
                return self._stuck
        try:
            from datetime import timedelta

            self._store.set_timeout(timedelta(seconds=FAILURE_CALL_S))  # a frozen store's host: bounded
            if not self._store.check([STOPPED]):
                return None
            line = str(self._store.get(STOPPED).decode(errors="replace"))
            with self._lock:
                self._stuck = line
            self._acknowledge_the_stop()
            return line
        except Exception as error:  # the store's loss, the peer watchdog tells
            logger.debug("hang watch: store call failed: %s", error)
            return None

    def wait_until_every_node_saw_the_stop(self, bound_s: float = STOP_SEEN_BOUND_S) -> None:
        """Wait, ``bound_s`` at most, until every node of the round has seen the stop this node
        declared or read (a frozen node never will: the bound ends the wait)."""
        if self._store is None:
            return
        deadline = self._clock() + bound_s
        try:
            while int(self._store.add("stop_seen", 0)) < self._world_size and self._clock() < deadline:
                time.sleep(0.1)
        except Exception as error:  # the store's host left: nobody else can read it now
            logger.debug("hang watch: store call failed: %s", error)

    def _acknowledge_the_stop(self) -> None:
        with self._lock:
            if self._saw_the_stop:
                return
            self._saw_the_stop = True
        self._store.add("stop_seen", 1)

    def failure(self, ask_the_job: bool) -> str | None:
        """How this round's attempt failed, after ``stop``: the job's first error line, as the round's
        store orders them (``failed``: the first node to set it wins), which this node's first line
        may be (it is set there for the other nodes), else, if ``ask_the_job``, the one another node
        wrote; None when no worker's code failed (its workers were stopped). A node whose own worker
        failed only after another node's (gloo's reset when that worker exited) names the other's.

        A node whose worker failed writes before it joins the next round, and the others read when
        they leave for it, which is after it joined: they do not miss it. Not asked at shutdown, when
        the store's host may be gone."""
        local = take_failures(self._progress.directory)
        self.failed_here = bool(local)
        store = self._store
        try:
            if store is not None:
                from datetime import timedelta

                store.set_timeout(timedelta(seconds=FAILURE_CALL_S))  # a frozen store's host: bounded
            if local and store is not None:
                return str(store.compare_set("failed", "", local[0]).decode(errors="replace"))
            if not local and ask_the_job and store is not None and store.check(["failed"]):
                return str(store.get("failed").decode(errors="replace"))
        except Exception as error:  # the store's loss, the peer watchdog tells
            logger.debug("hang watch: store call failed: %s", error)
        return local[0] if local else None

    def declare_timer(self, line: str) -> None:
        """A worker of this node overran its timer: every node's stacks first (bounded), then it dies."""
        self._declare(TIMER, line)

    def _look(self) -> None:
        last: dict[int, int] = {}
        woke = self._clock()
        try:
            self._connected()  # at once: a failure at the round's start is written for the others
            while not self._stopped.wait(self._interval):
                ranks = local_ranks(self._progress.directory)
                self._tell_a_stalled_restart()
                if not self._connected():
                    continue  # nothing is judged on this node's own connection trouble
                moved = self._progress.timed() or any(last.get(rank.pid) != rank.moves for rank in ranks)
                last = {rank.pid: rank.moves for rank in ranks}
                local_failure = None if self._first is not None else first_failure(self._progress.directory)
                try:
                    count, declared, stopped = self._exchange(moved, local_failure)
                except Exception as error:  # this look says nothing; a store that is gone, the peer watchdog tells
                    logger.debug("hang watch: store call failed: %s", error)
                    continue
                now = self._clock()
                with self._lock:
                    if now - woke > 2 * self._interval + 1:
                        self._judge.restart(now)  # this process was frozen: the stillness was its own
                    woke = now
                    self._judge.saw(count, bool(ranks), now)
                    if self._first == FAILED_FIRST and not self._postponed:
                        self._postponed = True
                        self._judge.postpone(now)
                    still = self._judge.still_for(now) if self._progress.timeout_s > 0 else None
                if stopped is not None:
                    with self._lock:
                        self._stuck = stopped
                    self._acknowledge_the_stop()
                    return
                if declared is not None:
                    kind, _, line = declared.partition(" ")
                    self._answer(kind, line)
                elif still is not None:
                    self._declare(HANG, f"hang: no rank of the job moved for {still:.0f} s (hang timeout "
                                        f"{self._judge.timeout_s:g} s), seen by {node_name()}")
                if self.hang() is not None:
                    return
        except Exception as error:  # a store that failed while declaring: the peer watchdog tells its loss
            logger.debug("hang watch: store call failed: %s", error)

    def _connected(self) -> bool:
        """Whether this node's own connection to the round's store is open (or the job is one node):
        opened as the watch starts, and tried again at each look until it opens. It is said
        once in the log when it cannot be; the stillness meanwhile was this node's, not the job's
        (the look after it starts the judge afresh)."""
        if self._store is not None or self._round_store is None:
            return True
        from torch.distributed import PrefixStore

        try:
            # A connection of its own: the agent's may be held by a long wait (its exit barrier).
            self._store = PrefixStore(KEY_PREFIX, self._round_store.clone())
        except Exception as error:
            if not self._told_unconnected:
                self._told_unconnected = True
                logger.warning("hang watch: this node cannot open its connection to the rendezvous store, trying "
                               "again every %g s: %s", self._interval, first_line(error))
            return False
        if self._told_unconnected:
            logger.warning("hang watch: this node's connection to the rendezvous store is open")
        return True

    def _tell_a_stalled_restart(self) -> None:
        """Once a worker's failure has waited ``RESTART_STALL_S`` for its restart, print the stacks
        of every thread of this launcher: the reader of a slow restart sees where it waits."""
        if self._told_stall:
            return
        now = self._clock()
        if self._failure_seen_at is None:
            if first_failure(self._progress.directory) is not None:
                self._failure_seen_at = now
            return
        if now - self._failure_seen_at < RESTART_STALL_S or self._stopped.is_set():
            return
        self._told_stall = True
        import traceback

        names = {thread.ident: thread.name for thread in threading.enumerate()}
        stacks = "".join(f"thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame))
                         for ident, frame in sys._current_frames().items())
        print(f"[torchx_ext.launcher] a worker of this node failed {RESTART_STALL_S:g} s ago and the launcher has "
              f"not rendezvoused again; its threads' stacks:\n{stacks}", file=sys.stderr, end="", flush=True)

    def _exchange(self, moved: bool, local_failure: str | None) -> tuple[int, str | None, str | None]:
        """The job's count (after this node's move, if any), a declaration, if one was made, and
        another node's stop, if one did; learns the round's first end (this node's
        ``local_failure`` is written first, as the job's first end if nothing came before it)."""
        if self._store is None:
            self._local_count += int(moved)
            if local_failure is not None and self._first is None:
                self._first, self.seen_failure = FAILED_FIRST, local_failure
            return self._local_count, None, None
        count = int(self._store.add("moves", int(moved)))
        if self._store.check([STOPPED]):
            return count, None, self._store.get(STOPPED).decode(errors="replace")
        if self._first is None and not self._answered:
            if local_failure is not None:
                self._store.compare_set("failed", "", local_failure)
                self._learn_first(self._store.compare_set(FIRST_END, "", FAILED_FIRST).decode())
            elif self._store.check([FIRST_END]):
                self._learn_first(self._store.get(FIRST_END).decode())
        if not self._answered and self._store.check(["declared"]):
            return count, self._store.get("declared").decode(), None
        return count, None, None

    def _learn_first(self, first: str) -> None:
        self._first = first
        if first == FAILED_FIRST:
            self.seen_failure = self._store.get("failed").decode(errors="replace")

    def failure_came_first(self, ask_the_job: bool) -> bool:
        """Whether a worker's failure was the round's first end, after ``stop``: as the round's store
        says (every node reads the same), if ``ask_the_job`` and this node does not know yet."""
        if self._first is None and ask_the_job and self._store is not None:
            try:
                from datetime import timedelta

                self._store.set_timeout(timedelta(seconds=FAILURE_CALL_S))  # a frozen store's host: bounded
                if self._store.check([FIRST_END]):
                    self._learn_first(self._store.get(FIRST_END).decode())
            except Exception as error:  # the store's loss, the peer watchdog tells
                logger.debug("hang watch: store call failed: %s", error)
        return self._first == FAILED_FIRST

    def discard_failures(self) -> None:
        """Forget the error lines this round's workers left: a hang ended it (a peer's reset after it)."""
        take_failures(self._progress.directory)

    def _declare(self, kind: str, line: str) -> None:
        if kind == HANG and self._store is not None and self._first is None:
            self._first = self._store.compare_set(FIRST_END, "", HANG_FIRST).decode()
            if self._first == FAILED_FIRST:
                self._learn_first(FAILED_FIRST)
        if kind == HANG and self._first == FAILED_FIRST and not self._postponed:
            with self._lock:  # a failure came first: its node's agent ends the round (see _look)
                self._postponed = True
                self._judge.postpone(self._clock())
            return
        if self._store is not None:
            # The first declaration is the job's: a node that decided too answers that one.
            written = self._store.compare_set("declared", "", f"{kind} {line}").decode()
            kind, _, line = written.partition(" ")
        self._answer(kind, line)

    def _answer(self, kind: str, line: str) -> None:
        with self._lock:  # the look's thread and the timer's may both answer
            if self._answered:
                return
            self._answered = self.ended_hung = True
        print(f"[torchx_ext.launcher] {line}", file=sys.stderr, flush=True)
        write_stacks(f"{line}: every rank of this node, before any is stopped", self._progress.directory)
        if self._store is not None:
            self._store.add("acks", 1)
            deadline = self._clock() + ACK_BOUND_S
            while int(self._store.add("acks", 0)) < self._world_size and self._clock() < deadline:
                if self._stopped.wait(0.1):
                    break  # the round is over: its keys may be gone
        if kind == HANG:
            with self._lock:
                self._hang = line


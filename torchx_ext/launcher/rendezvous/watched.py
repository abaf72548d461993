"""The launcher's c10d rendezvous, with the watchdog (``watchdog.py``) running while workers train.

Registered through torch's documented registry of rendezvous backends under our own name
(``registry.py``, from the settings ``config.py`` wrote), it wraps a c10d handler over the store torch's c10d backend makes (same endpoint, ``is_host``,
``store_type`` and ``read_timeout``): by default the arrival rendezvous (``arrivals.py``,
a constant number of store operations per node), or with ``--c10d-handler torch`` torch's own
handler, whose rounds it leaves as they are. A loss the
watchdog declares reaches the agent where it already looks for membership changes,
``num_nodes_waiting``: the agent then stops its workers (blocked in a collective) and
re-rendezvouses, as it does when a node joins. Such restarts are counted here, up to
``--max-restarts``, apart from torch's count of worker failures (which this handler cannot see):
a launcher may restart ``--max-restarts`` times for each. With none left the agent stops its workers
and the launcher exits with the loss's line. A store that stopped answering cannot be rendezvoused
with again (a TCPStore client never reconnects), and the agent's own calls to it hang, so then
the launcher reports the loss and exits at once; its workers die with it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousHandler

from torchx_ext.launcher.hang_core import FAILED, HUNG
from torchx_ext.launcher.hang_watch import HangWatch, LaunchProgress
from torchx_ext.launcher.rendezvous.errors import HangError, PeerLostError, StuckError
from torchx_ext.launcher.rendezvous.pauses import prompt_pauses
from torchx_ext.launcher.rendezvous.ranks import in_node_rank_order, torch_round
from torchx_ext.launcher.rendezvous.settings import BACKEND
from torchx_ext.launcher.rendezvous.spare import let_the_first_round_form, marked_while_spare
from torchx_ext.launcher.rendezvous.watchdog import Loss, RoundWatch
from torchx_ext.replica_env import LIVENESS_FILE_ENV

logger = logging.getLogger("torchx_ext.launcher")

THREADS_END_S = 5.0
"""How long a handler's shutdown waits for its watches' threads to end: a caller of ``main()`` or
``launch()`` whose process then exits must have none left in a store call (it would abort)."""


def rejoined_line(rank: int, world_size: int, joined_s: float, counted_s: float, stopped_s: float | None,
                  spent: dict[str, float], began: float) -> str:
    """What a launcher says once it rendezvoused again: where the restart's time went, on its own
    clock (``stopped_s``: from when it was told to restart its workers until they were stopped;
    ``spent``: the arrival rendezvous' phases of the join), and when it began on this host's wall
    clock (``began``, as torch's own log lines are stamped: a reader lines them up)."""
    phases = "".join(f", {spent[phase]:.1f} s {words}" for phase, words in (
        ("outside", "outside a full round"), ("turn", "for its turn"), ("seal", "for the round's seal")) if phase in spent)
    stopped = "" if stopped_s is None else f"; its workers stopped in {stopped_s:.1f} s"
    stamp = time.strftime("%H:%M:%S", time.localtime(began)) + f".{int(began % 1 * 1000):03d}"
    return (f"rendezvous again from {stamp}: rank {rank} of {world_size}, joined in {joined_s:.1f} s{phases}; the last "
            f"attempt's end counted in {counted_s:.1f} s{stopped}")


def watched_handler(inner: Any, *, timeout_s: float, restarts: int, endpoint: str,
                    on_store_loss: Callable[[Loss], None], node_rank: int, local_addr: str | None, spares: int,
                    max_nodes: int, forget_old_rounds: Callable[[], None] | None = None,
                    progress: LaunchProgress | None = None) -> Any:
    """torch's c10d handler ``inner`` as our launcher runs it (also what scripts/bench measures);
    its round's rank 0 calls ``forget_old_rounds`` after each rendezvous."""
    return WatchedRendezvousHandler(inner, timeout_s, restarts, endpoint, on_store_loss, node_rank, local_addr,
                                    spares, max_nodes, forget_old_rounds, progress)


class WatchedRendezvousHandler(RendezvousHandler):  # type: ignore[misc]  # torch is untyped here
    """A c10d handler (``inner``) whose rounds the watchdog and the hang watch look at: a loss or a
    hang becomes a restart through ``num_nodes_waiting``, counted up to ``restarts``. This module
    imports torch's handler class: ``registry.create_handler`` imports it when torch asks."""

    def __init__(self, inner: Any, timeout_s: float, restarts: int, endpoint: str,
                 on_store_loss: Callable[[Loss], None], node_rank: int, local_addr: str | None,
                 spares: int, max_nodes: int, forget_old_rounds: Callable[[], None] | None,
                 progress: LaunchProgress | None) -> None:
        self._inner = inner
        self._progress = progress
        self._hang_watch: HangWatch | None = None
        self._hang_taken = False  # this round's hang has stopped the workers already
        self._ended_watch: HangWatch | None = None  # the last round's, until the next one forms
        self._stopping: str | None = None  # why this node stops restarting: the job's attempts are stuck
        self._forget_old_rounds = forget_old_rounds
        self._max_nodes = max_nodes
        self._spares = spares
        self._joined = False
        self._node_rank = node_rank
        self._local_addr = local_addr
        self._timeout_s = timeout_s
        self._restarts_left = restarts
        self._restarts = restarts
        self._endpoint = endpoint
        self._on_store_loss = on_store_loss
        self._watch: RoundWatch | None = None
        self._stopped: list[RoundWatch] = []  # watches whose threads may still be ending
        self._kept: tuple[int | None, int] = (None, -1)  # torch's round this node was last in, its rank
        self._noticed_at: float | None = None
        """When this round's ``num_nodes_waiting`` first told the agent to restart its workers."""

    def get_backend(self) -> str:
        return BACKEND  # torch checks that a handler is of the backend it was asked for

    @property
    def use_agent_store(self) -> bool:
        return bool(self._inner.use_agent_store)

    def next_rendezvous(self) -> Any:
        began, noticed, self._noticed_at = time.monotonic(), self._noticed_at, None
        began_at = time.time()
        again = self._joined
        self._end_hang_watch()
        counted = time.monotonic()
        previous, self._watch = self._watch, None
        if previous is not None:
            previous.judge_store_only()
        if self._spares and not self._joined and self._node_rank >= self._max_nodes:
            let_the_first_round_form(self._inner)
        try:
            with prompt_pauses(self._inner), marked_while_spare(
                    self._inner, os.environ.get(LIVENESS_FILE_ENV), closed_releases=self._spares > 0 and not self._joined):
                info = self._inner.next_rendezvous()
            self._joined = True
            if again:
                logger.info("%s", rejoined_line(info.rank, info.world_size, time.monotonic() - counted, counted - began,
                                                None if noticed is None else began - noticed,
                                                getattr(getattr(self._inner, "rendezvous", None), "spent", {}),
                                                began_at))
        except RendezvousClosedError as closed:
            self._stop_if_stopped_elsewhere(closed)
            raise
        finally:
            if previous is not None:
                previous.stop()
                # kept until their threads end (each holds store connections until then)
                self._stopped = [watch for watch in [*self._stopped, previous] if not watch.ended()]
        if self._node_rank >= 0 and not getattr(self._inner, "ranks_by_node_rank", False):
            round_ = torch_round(self._inner)
            kept = self._kept[1] if round_ is not None and self._kept[0] == round_ - 1 else None
            info = in_node_rank_order(info, self._node_rank, self._local_addr, bool(self._inner.use_agent_store),
                                      kept)
            self._kept = (round_, info.rank)
        if info.rank == 0 and self._forget_old_rounds is not None:
            try:
                self._forget_old_rounds()
            except Exception as error:  # a store that fails here fails the agent's next call too
                logger.debug("could not delete old rounds' keys: %s", error)
        if info.world_size > 1 and self._timeout_s > 0:
            self._watch = RoundWatch(
                info.store, info.rank, info.world_size, self._timeout_s, self._on_loss, self._endpoint
            ).start()
        if self._progress is not None and (self._progress.timeout_s > 0 or self._progress.serves_timer):
            self._hang_watch = HangWatch(self._progress, info.store, info.world_size).start()
        return info

    def _end_hang_watch(self, at_shutdown: bool = False) -> None:
        """Stop the round's hang watch and count how its attempt ended; refuse to go on when
        attempts keep hanging or failing at one point (or another node did in this round)."""
        watch, self._hang_watch = self._hang_watch, None
        hang_taken, self._hang_taken = self._hang_taken, False
        if watch is None or self._progress is None:
            return
        self._ended_watch = watch
        watch.stop()
        # Read now, not only by the look: a node one attempt behind (each judges "the same point"
        # by its own looks) would otherwise wait in the next round for a node that stopped.
        elsewhere = watch.stuck_elsewhere() or (None if at_shutdown else watch.read_stuck())
        how: str | None = HUNG
        failure: str | None = None
        lost = self._watch is not None and self._watch.loss() is not None
        ask = not (at_shutdown or lost or elsewhere)
        if not watch.ended_hung or watch.failure_came_first(ask_the_job=ask):  # a failure, then the stillness it caused
            failure = watch.failure(ask_the_job=ask) or watch.seen_failure or None
            how = None if failure is None and elsewhere is None and not watch.ended_hung else FAILED
            if watch.failed_here and not hang_taken:  # torch's agent restarts a failed node's workers on its own count
                self._restarts_left = max(0, self._restarts_left - 1)
        else:
            watch.discard_failures()
        stuck = self._progress.attempt_ended(how, watch.moved_looks, failure or "")
        if elsewhere is not None and not at_shutdown:
            self._stop(f"{elsewhere}, seen by another node")
        if stuck:
            line = self._progress.stuck.line()
            watch.declare_stuck(line)
            self._stopping = self._stopping or self._unused(line)
            if not at_shutdown:
                self._stop(line)

    def _stop_if_stopped_elsewhere(self, closed: Exception) -> None:
        """The rendezvous closed while this node waited for the next round: when a node stopped
        restarting in the last one, stop with it (not as a closed rendezvous, which a scheduler retries)."""
        elsewhere = self._ended_watch.read_stuck() if self._ended_watch is not None else None
        if elsewhere is not None:
            self._stop(f"{elsewhere}, seen by another node", closed)

    def _stop(self, line: str, cause: Exception | None = None) -> None:
        self._stopping = self._unused(line)
        raise StuckError(self._stopping) from cause

    def _unused(self, line: str) -> str:
        return f"{line}; {self._restarts_left} restarts in place left unused, and the scheduler's"

    def num_nodes_waiting(self) -> int:
        waiting = self._num_nodes_waiting()
        if waiting and self._noticed_at is None:
            self._noticed_at = time.monotonic()
        return waiting

    def _num_nodes_waiting(self) -> int:
        if self._hang_watch is not None and self._hang_watch.stuck_elsewhere() is not None:
            self._end_hang_watch()  # raises StuckError: the job stops restarting with that node
        hang = self._hang_watch.hang() if self._hang_watch is not None and not self._hang_taken else None
        if hang is not None:
            self._hang_taken = True
            if self._restarts_left == 0:
                self._end_hang_watch()  # the attempt counts (for the replica's next launcher too)
                raise HangError(f"{hang}; no restart left (--max-restarts {self._restarts})")
            self._restarts_left -= 1
            logger.warning("%s; stopping the workers to rendezvous again (%d of %d restarts left)",
                           hang, self._restarts_left, self._restarts)
            return 1
        loss = self._watch.loss() if self._watch is not None else None
        if loss is None:
            return int(self._inner.num_nodes_waiting())
        assert self._watch is not None
        self._watch.judge_store_only()  # stopped once the next round has formed, or at shutdown
        if self._restarts_left == 0:
            raise PeerLostError(f"{loss.line}; no restart left (--max-restarts {self._restarts})")
        self._restarts_left -= 1
        logger.warning(
            "%s; stopping the workers to rendezvous again (%d of %d restarts left)",
            loss.line, self._restarts_left, self._restarts,
        )
        return 1

    def is_closed(self) -> bool:
        return bool(self._inner.is_closed())

    def set_closed(self) -> None:
        self._inner.set_closed()

    def get_run_id(self) -> str:
        return str(self._inner.get_run_id())

    def shutdown(self) -> bool:
        hang_watch = self._hang_watch
        if hang_watch is not None:
            self._end_hang_watch(at_shutdown=True)  # the last attempt counts, for the next launcher
        if self._watch is not None:
            self._watch.judge_store_only()
        try:
            return bool(self._inner.shutdown())
        finally:
            if self._stopping is not None and self._ended_watch is not None:
                self._ended_watch.wait_until_every_node_saw_the_stop()  # before this node's store goes
            self._stop_watching()
            if self._ended_watch is not None:  # this round's (ended above) or the last one's, still writing its
                self._ended_watch.join(THREADS_END_S)  # stacks: no store call left, no line after the launcher's

    def _on_loss(self, loss: Loss) -> None:
        if loss.of_store:
            # A node that stops restarting with the job, whose store's host left first, stops as stuck.
            self._on_store_loss(loss if self._stopping is None else dataclasses.replace(
                loss, line=self._stopping, of_stuck_job=True))

    def _stop_watching(self) -> None:
        """Stop this round's watch, and wait for every watch's threads to end (bounded)."""
        if self._watch is not None:
            self._watch.stop()
            self._stopped.append(self._watch)
            self._watch = None
        until = time.monotonic() + THREADS_END_S
        for watch in self._stopped:
            watch.join(max(0.0, until - time.monotonic()))
        self._stopped.clear()

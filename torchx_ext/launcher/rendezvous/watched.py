"""The launcher's c10d rendezvous, with the watchdog (``watchdog.py``) running while workers train.

Registered through torch's documented registry of rendezvous backends under our own name, it
wraps a c10d handler over the store torch's c10d backend makes (same endpoint, ``is_host``,
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

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from torchx_ext.errors import InvalidArgumentError, TorchxExtError, first_line
from torchx_ext.launcher.rendezvous.arrival_handler import arrival_handler
from torchx_ext.launcher.hang_core import FAILED, HUNG
from torchx_ext.launcher.hang_watch import HangWatch, LaunchProgress, register, registered
from torchx_ext.launcher.rendezvous.loopback import LOOPBACK_ADDRESS, endpoint_is_loopback, loopback_agents_store
from torchx_ext.launcher.rendezvous.pauses import prompt_pauses
from torchx_ext.launcher.rendezvous.spare import let_the_first_round_form, marked_while_spare
from torchx_ext.launcher.rendezvous.store_keys import delete_keys
from torchx_ext.launcher.rendezvous.watchdog import DEFAULT_TIMEOUT_S, Loss, RoundWatch
from torchx_ext.replica_env import LIVENESS_FILE_ENV

logger = logging.getLogger("torchx_ext.launcher")

BACKEND = "torchx_ext-c10d"
TIMEOUT_KEY = "peer_timeout"
"""The ``--rdzv-conf`` key of the peer timeout (seconds; 0 turns the watchdog off). Not torch's own
``heartbeat_timeout``, which bounds one keep-alive write."""
_RESTARTS_KEY = "torchx_ext_max_restarts"
_NODE_RANK_KEY = "torchx_ext_node_rank"
_SPARES_KEY = "torchx_ext_spares"
_HANDLER_KEY = "torchx_ext_c10d_handler"
HANDLERS = ("arrivals", "torch")
"""``--c10d-handler``: the arrival rendezvous (the default), or torch's dynamic c10d handler."""
_NODE_RANK_PREFIX = "torchx_ext.node_rank."


class PeerLostError(TorchxExtError):
    """The watchdog declared a peer or the store lost and no restart was left."""


class HangError(TorchxExtError):
    """The hang watchdog decided a hang and no restart was left."""


class StuckError(HangError):
    """Attempts kept hanging at the same point (``StuckAttempts``): restarting is pointless."""


def peer_timeout(flag: str | float | None, rdzv_configs: dict[str, Any]) -> float:
    """The timeout from ``--peer-timeout`` or, when the flag is not given, the
    ``peer_timeout`` key of ``--rdzv-conf``; the default when neither is. Checked here."""
    given, where = (flag, "--peer-timeout") if flag is not None else (rdzv_configs.get(TIMEOUT_KEY), f"--rdzv-conf {TIMEOUT_KEY}")
    if given is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(given)
    except (TypeError, ValueError):
        value = -1.0
    if not (value == 0 or 1 <= value <= 86400):
        raise InvalidArgumentError(
            f"invalid {where} {given!r}: expected seconds from 1 to 86400 (a peer silent that long is lost), or 0 for no watchdog"
        )
    return value


def watch_rendezvous(config: Any, timeout_s: float, on_store_loss: Callable[[Loss], None], node_rank: int = 0,
                     spares: int = 0, handler: str = HANDLERS[0], progress: LaunchProgress | None = None) -> None:
    """Switch ``config`` (torch's ``LaunchConfig``) from c10d to the watched c10d; leaves every
    other backend as it is. The watchdog runs for runs of more than one node, with a timeout (not
    0). A run of a fixed number of nodes orders its group ranks by the nodes' ``--node-rank`` (which
    torch's c10d ignores) whenever those are distinct (the arrival rendezvous ranks so itself;
    torch's handler is reordered by ``in_node_rank_order``). A run on torch's handler gets it
    without torch's fixed pauses (``rendezvous_pauses``). With ``progress``, each round runs the
    hang watchdog (``hang_watch.py``) too."""
    if handler not in HANDLERS:
        raise InvalidArgumentError(f"invalid --c10d-handler {handler!r}: expected one of {', '.join(HANDLERS)}")
    for key, _ in _TIMEOUTS:
        _check_whole(key, config.rdzv_configs.get(key))
    config.rdzv_configs.pop(TIMEOUT_KEY, None)
    if config.rdzv_backend != "c10d":
        return
    several = config.max_nodes >= 2
    register(progress)
    # One node of a run with hot spares has no peer to watch, but still its place among the spares' ranks.
    _register(on_store_loss)
    config.rdzv_backend = BACKEND
    config.rdzv_configs[TIMEOUT_KEY] = timeout_s if several else 0
    config.rdzv_configs[_RESTARTS_KEY] = config.max_restarts
    config.rdzv_configs[_SPARES_KEY] = spares
    config.rdzv_configs[_HANDLER_KEY] = handler
    fixed = config.min_nodes == config.max_nodes
    config.rdzv_configs[_NODE_RANK_KEY] = node_rank if fixed and (several or spares) else -1


def c10d_handler(min_nodes: int, max_nodes: int, endpoint: str, run_id: str, rdzv_configs: dict[str, Any], *,
                 handler: str = HANDLERS[0], node_rank: int = -1, local_addr: str | None = None,
                 peer_timeout_s: float = 0, max_restarts: int = 0) -> Any:
    """The c10d rendezvous handler the launcher runs for these settings (``watch_rendezvous``, then
    torch's registry, as torch's ``launch_agent`` makes it), for tests and benches that need it
    apart from an agent. A lost store (with a peer timeout) is only logged."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
    from torch.distributed.launcher.api import LaunchConfig

    config = LaunchConfig(min_nodes=min_nodes, max_nodes=max_nodes, nproc_per_node=1, run_id=run_id,
                          rdzv_endpoint=endpoint, rdzv_backend="c10d", rdzv_configs=dict(rdzv_configs),
                          max_restarts=max_restarts)
    watch_rendezvous(config, peer_timeout_s, lambda loss: logger.warning("%s", loss.line), node_rank=node_rank,
                     handler=handler)
    return rendezvous_handler_registry.create_handler(RendezvousParameters(
        backend=config.rdzv_backend, endpoint=endpoint, run_id=run_id, min_nodes=min_nodes, max_nodes=max_nodes,
        local_addr=local_addr, **config.rdzv_configs))


_TIMEOUTS = (("join_timeout", 600), ("last_call_timeout", 30), ("keep_alive_interval", 5),
             ("keep_alive_max_attempt", 3))
"""torch's c10d settings (``--rdzv-conf``) that both handlers read, with torch's defaults."""


def _check_whole(key: str, given: Any) -> None:
    if given is None:
        return
    try:
        seconds = int(given)
    except (TypeError, ValueError):
        seconds = 0
    if seconds <= 0:
        what = "a whole number, 1 or more" if key == "keep_alive_max_attempt" else "a whole number of seconds, 1 or more"
        raise InvalidArgumentError(f"invalid --rdzv-conf {key}={given!r}: expected {what}")


_store_loss_handler: list[Callable[[Loss], None]] = []


def _register(on_store_loss: Callable[[Loss], None]) -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    _store_loss_handler[:] = [on_store_loss]
    rendezvous_handler_registry.register(BACKEND, _create_handler)  # the same creator again is a no-op


def _create_handler(params: Any) -> Any:
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    config = dict(params.config)
    timeout = float(config.pop(TIMEOUT_KEY))
    restarts = int(config.pop(_RESTARTS_KEY))
    node_rank = int(config.pop(_NODE_RANK_KEY))
    spares = int(config.pop(_SPARES_KEY))
    kind = config.pop(_HANDLER_KEY)
    c10d = RendezvousParameters(
        backend="c10d",
        endpoint=params.endpoint,
        run_id=params.run_id,
        min_nodes=params.min_nodes,
        max_nodes=params.max_nodes,
        local_addr=params.local_addr,
        **config,
    )
    # A job on this host alone: its store on loopback (loopback.py). torch's handler tells the workers
    # its --local-addr (else the host's name) as the store's address: 127.0.0.1 when none is given.
    local = loopback_agents_store(c10d) if kind != "torch" or params.local_addr is None else None
    forget: Callable[[], None] | None = None
    if kind == "torch":
        if local is not None:
            c10d.local_addr = LOOPBACK_ADDRESS
        else:
            from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

            _, local = create_backend(c10d)  # as torch's registry does for c10d
        inner = _torch_handler(local, c10d)
        forget = _old_torch_rounds_forgetter(inner, local, params.run_id)
    else:
        inner = _arrivals(c10d, node_rank, local)  # it deletes old rounds itself
    return watched_handler(inner, timeout_s=timeout, restarts=restarts, endpoint=params.endpoint,
                           on_store_loss=_store_loss_handler[0], node_rank=node_rank, local_addr=params.local_addr,
                           spares=spares, max_nodes=params.max_nodes, forget_old_rounds=forget, progress=registered())


def _torch_handler(store: Any, params: Any) -> Any:
    """torch's c10d handler over ``store``, as torch's registry builds it over the store it makes."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    return create_handler(store, C10dRendezvousBackend(store, params.run_id), params)


def _old_torch_rounds_forgetter(inner: Any, store: Any, run_id: str) -> Callable[[], None]:
    """Deletes the keys of torch's handler's rounds before the one before its current round: its
    round stores (``torch.rendezvous.<run>.<round>/``: the agents' and the watchdog's keys), which
    torch never deletes. Its own state is one key, rewritten."""
    pattern = re.compile(rf"^torch\.rendezvous\.{re.escape(run_id)}\.(\d+)/")

    def forget() -> None:
        current = _torch_round(inner)
        if current is None:
            return  # a torch whose internals differ
        def old(key: str) -> bool:
            match = pattern.match(key)
            return match is not None and int(match.group(1)) < current - 1

        delete_keys(store, old)

    return forget


def _arrivals(params: Any, node_rank: int, store: Any | None) -> Any:
    """The arrival rendezvous over ``store``, else the store torch's c10d backend makes of
    ``params``, with torch's settings of ``_TIMEOUTS`` and their defaults."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    given = {key: params.get_as_int(key, default) for key, default in _TIMEOUTS}
    if store is None:
        _, store = create_backend(params)
    return arrival_handler(store, params.run_id, params.min_nodes, params.max_nodes,
                           loopback=endpoint_is_loopback(params.endpoint),
                           join_timeout_s=given["join_timeout"], last_call_s=given["last_call_timeout"],
                           node_rank=node_rank, local_addr=params.local_addr,
                           keep_alive_s=given["keep_alive_interval"], keep_alive_misses=given["keep_alive_max_attempt"])


def watched_handler(inner: Any, *, timeout_s: float, restarts: int, endpoint: str,
                    on_store_loss: Callable[[Loss], None], node_rank: int, local_addr: str | None, spares: int,
                    max_nodes: int, forget_old_rounds: Callable[[], None] | None = None,
                    progress: LaunchProgress | None = None) -> Any:
    """torch's c10d handler ``inner`` as our launcher runs it (also what scripts/bench measures);
    its round's rank 0 calls ``forget_old_rounds`` after each rendezvous."""
    return _watched_handler_class()(inner, timeout_s, restarts, endpoint, on_store_loss, node_rank, local_addr,
                                    spares, max_nodes, forget_old_rounds, progress)


def _watched_handler_class() -> type:
    from torch.distributed.elastic.rendezvous import RendezvousHandler

    class WatchedRendezvousHandler(RendezvousHandler):  # type: ignore[misc]  # torch is untyped here
        def __init__(self, inner: Any, timeout_s: float, restarts: int, endpoint: str,
                     on_store_loss: Callable[[Loss], None], node_rank: int, local_addr: str | None,
                     spares: int, max_nodes: int, forget_old_rounds: Callable[[], None] | None,
                     progress: LaunchProgress | None) -> None:
            self._inner = inner
            self._progress = progress
            self._hang_watch: HangWatch | None = None
            self._hang_taken = False  # this round's hang has stopped the workers already
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

        def get_backend(self) -> str:
            return BACKEND  # torch checks that a handler is of the backend it was asked for

        @property
        def use_agent_store(self) -> bool:
            return bool(self._inner.use_agent_store)

        def next_rendezvous(self) -> Any:
            self._end_hang_watch()
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
            finally:
                if previous is not None:
                    previous.stop()
                    # kept until their threads end (each holds store connections until then)
                    self._stopped = [watch for watch in [*self._stopped, previous] if not watch.ended()]
            if self._node_rank >= 0 and not getattr(self._inner, "ranks_by_node_rank", False):
                round_ = _torch_round(self._inner)
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
            self._hang_taken = False
            if watch is None or self._progress is None:
                return
            watch.stop()
            elsewhere = watch.stuck_elsewhere()
            how: str | None = HUNG
            failure: str | None = None
            if not watch.ended_hung:
                lost = self._watch is not None and self._watch.loss() is not None
                failure = watch.failure(ask_the_job=not (at_shutdown or lost or elsewhere))
                how = None if failure is None and elsewhere is None else FAILED
                if watch.failed_here:  # torch's agent restarts a failed node's workers on its own count
                    self._restarts_left = max(0, self._restarts_left - 1)
            stuck = self._progress.attempt_ended(how, watch.moved_looks, failure or "")
            if elsewhere is not None and not at_shutdown:
                raise StuckError(f"{elsewhere}, seen by another node; {self._restarts_left} restarts in place left "
                                 "unused, and the scheduler's")
            if stuck:
                line = self._progress.stuck.line()
                watch.declare_stuck(line)
                if not at_shutdown:
                    raise StuckError(f"{line}; {self._restarts_left} restarts in place left unused, and the "
                                     "scheduler's")

        def num_nodes_waiting(self) -> int:
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
                self._stop_watching()
                if hang_watch is not None:  # as the watches' threads: none left in a store call
                    hang_watch.join(THREADS_END_S)

        def _on_loss(self, loss: Loss) -> None:
            if loss.of_store:
                self._on_store_loss(loss)

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

    return WatchedRendezvousHandler


def _torch_round(handler: Any) -> int | None:
    """The round torch's c10d handler is in (None: a torch whose internals differ)."""
    current = getattr(getattr(getattr(handler, "_state_holder", None), "state", None), "round", None)
    return current if isinstance(current, int) else None


def in_node_rank_order(info: Any, node_rank: int, local_addr: str | None, shared_store: bool,
                       kept: int | None = None) -> Any:
    """``info`` (torch's RendezvousInfo) with this node's rank chosen as the arrival rendezvous
    chooses (``rendezvous_core.assign_ranks``): ``kept``, its rank in the round just before, when it
    was a member there; the other nodes fill the free ranks by ``--node-rank`` when every node gave
    a distinct one, else in torch's order (by host name or --local-addr, then pid). So survivors
    keep their ranks, and a hot spare (``spare.py``, node rank N or above) that replaced node k
    takes k's.

    torch's c10d ranks agents by host name, so replica k of a scheduler need not run group rank
    k: the first replica's log is then not rank 0's, nor rank r on the node a user expects. Every
    node publishes its claim in the round's store and reads all of them: all take the same choice.
    With the agents' store shared (``shared_store``), the workers find it where torch's rank 0
    serves it, whatever the ranks. Without (``--max-restarts``: a fresh store per attempt), global
    rank 0's worker serves the workers' store at MASTER_ADDR: that must be the new rank 0's host,
    so it is published again, by the new rank 0 (under keys of our own: torch's rank 0 has
    published its own already)."""
    import json

    from torch.distributed import PrefixStore
    from torch.distributed.elastic.rendezvous import RendezvousInfo
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

    from torchx_ext.launcher.rendezvous.core import RankClaim, assign_ranks

    if not 0 <= info.rank < info.world_size:
        return info  # torch's handler under clock skew can say so (docs/launcher.md): nothing to reorder
    store = info.store
    store.set(f"{_NODE_RANK_PREFIX}{info.rank}", json.dumps([node_rank, -1 if kept is None else kept]))
    claims = []
    for torch_rank, value in enumerate(store.multi_get([f"{_NODE_RANK_PREFIX}{rank}" for rank in range(info.world_size)])):
        given, was = json.loads(value)
        claims.append(RankClaim(None if was < 0 else int(was), int(given), (torch_rank,)))
    rank = assign_ranks(claims)[info.rank]
    if rank == info.rank:
        return info
    bootstrap = info.bootstrap_store_info
    if not shared_store:
        bootstrap = RendezvousStoreInfo.build(rank, PrefixStore("torchx_ext.bootstrap/", store), local_addr=local_addr)
    return RendezvousInfo(store, rank, info.world_size, bootstrap)


_CLOSED_MARKS = ("Connection was likely closed", "Broken pipe", "Connection reset by peer")


def closed_store_line(error: BaseException, endpoint: str) -> str | None:
    """The line a launcher says when a store call failed because the store's end of the
    connection closed (its host exited or was killed), before the watchdog's silence judged it
    lost: the same words (schedulers read them as the consequence of the host's loss). None for
    other errors (a timeout, a store never reached)."""
    import torch.distributed as dist

    seen: BaseException | None = error
    while seen is not None:
        text = str(seen)
        if isinstance(seen, dist.DistNetworkError) and any(mark in text for mark in _CLOSED_MARKS):
            return f"lost the rendezvous store at {endpoint}: its connection closed ({first_line(seen)})"
        seen = seen.__cause__ or seen.__context__
    return None


def exit_for_store_loss(loss: Loss, exit_code: int, write_report: Callable[[str], None]) -> None:
    """The launcher's answer to a lost store: report, then leave at once (the agent's own store
    calls hang, so nothing else would end this process). Workers die with the launcher. The report
    gets 2 s (a cut node's shared file system, a full pipe may block it): leaving is not delayed."""

    def report() -> None:
        write_report(loss.line)
        print(f"[torchx_ext.launcher] error: {loss.line}; stopping", file=sys.stderr, flush=True)

    try:
        reporter = threading.Thread(target=report, name="torchx_ext: last report", daemon=True)
        reporter.start()
        reporter.join(REPORT_BOUND_S)
    finally:
        os._exit(exit_code)


REPORT_BOUND_S = 2.0
THREADS_END_S = 5.0
"""How long a handler's shutdown waits for its watches' threads to end: a caller of ``main()`` or
``launch()`` whose process then exits must have none left in a store call (it would abort)."""

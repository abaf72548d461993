"""torch's elastic timer in our launcher: a worker that overruns its ``expires`` block ends, its agent goes on.

With ``TORCHELASTIC_ENABLE_FILE_TIMER=1`` torchrun's agent serves torch's ``FileTimerServer``: a
worker that wraps a step in ``torch.distributed.elastic.timer.expires(after=S)`` (its client
configured on ``TORCHELASTIC_TIMER_FILE``) is killed when it overruns, and then the server kills
its own agent too (torch ends the process that serves the timer), so on one node nothing goes
on. Here the launcher serves the same file itself, before its agent would: the overrunning
worker gets every rank's stack written first (``hang_watch``), then torch's signal; the agent
sees a failed worker and restarts it within ``--max-restarts``, or the launcher fails and the
scheduler's ``max_retries`` apply. Workers see the same variables as under torchrun. While a
worker holds a timer, the hang watchdog counts its rank as moving: the worker's own timer decides.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torchx_ext.launcher.bootstrap import SERVED_TIMER_ENV
from torchx_ext.launcher.hang_watch import LaunchProgress
from torchx_ext.launcher.stacks import LocalRank, local_ranks, write_stacks

logger = logging.getLogger("torchx_ext.launcher")

ENABLE_ENV = "TORCHELASTIC_ENABLE_FILE_TIMER"
FILE_ENV = "TORCHELASTIC_TIMER_FILE"


@contextmanager
def served_timer(progress: LaunchProgress, run_id: str) -> Iterator[None]:
    """Serve torch's file timer for this launch's workers, when the job's environment asks for it."""
    if os.environ.get(ENABLE_ENV) != "1":
        yield
        return
    path = os.environ.get(FILE_ENV) or os.path.join(tempfile.gettempdir(), f"watchdog_timer_{uuid.uuid4()}")
    server = _server_class()(progress, file_path=path, run_id=run_id, max_interval=0.1, daemon=True)
    os.environ.pop(ENABLE_ENV)
    os.environ[FILE_ENV] = path  # the agent hands it to every worker
    os.environ[SERVED_TIMER_ENV] = "1"  # the agent must not see ENABLE_ENV; the workers get it back
    server.start()
    progress.timed, progress.serves_timer = server.timed, True
    logger.info("serving torch's elastic timer (%s=1) at %s", ENABLE_ENV, path)
    try:
        yield
    finally:
        progress.timed, progress.serves_timer = (lambda: False), False
        server.stop()


def _server_class() -> type:
    from torch.distributed.elastic.timer import FileTimerServer

    class StackingTimerServer(FileTimerServer):  # type: ignore[misc]  # torch is untyped here
        """torch's server, with stacks before a kill and no kill of the server's own process."""

        def __init__(self, progress: LaunchProgress, **kwargs: Any) -> None:
            self._progress = progress
            self._held: dict[tuple[int, str], float] = {}
            self._expired: dict[int, Any] = {}
            self._announced: set[int] = set()  # overdue workers named in a line already
            super().__init__(log_event=self._event, **kwargs)

        def timed(self) -> bool:
            held = list(self._held)
            return any(_alive(pid) for pid, _ in held)

        def register_timers(self, timer_requests: list[Any]) -> None:
            super().register_timers(timer_requests)
            for request in timer_requests:
                key = (request.worker_pid, request.scope_id)
                if request.expiration_time < 0:
                    self._held.pop(key, None)
                else:
                    self._held[key] = request.expiration_time

        def clear_timers(self, worker_pids: set[int]) -> None:
            super().clear_timers(worker_pids)
            self._held = {key: value for key, value in self._held.items() if key[0] not in worker_pids}

        def _event(self, name: str, request: Any) -> None:
            if name == "timer expired" and request is not None:
                self._expired.setdefault(request.worker_pid, request)

        def _reap_worker(self, worker_pid: int, signal: int) -> bool:
            if worker_pid == os.getpid():
                # torch's server ends its own process after a kill: this launcher goes on instead.
                return True
            if worker_pid in self._announced:
                return bool(super()._reap_worker(worker_pid, signal))
            # Every worker overdue now, in one line: peers waiting in the hung rank's collective overrun too.
            overdue = {worker_pid: self._expired.pop(worker_pid, None), **{
                pid: requests[0] for pid, requests in self.get_expired_timers(time.time()).items()}}
            ranks = {each.pid: each for each in local_ranks(self._progress.directory)}
            line = "timer: " + ", ".join(_overran(pid, ranks.get(pid), request) for pid, request in sorted(
                overdue.items(), key=lambda item: ranks[item[0]].rank if item[0] in ranks else item[0]))
            line += "; stopped" if len(overdue) == 1 else "; each is stopped"
            self._announced.update(overdue)
            watch = self._progress.watch
            if watch is not None:
                watch.declare_timer(line)
            else:
                print(f"[torchx_ext.launcher] {line}", file=sys.stderr, flush=True)
                write_stacks(f"{line}: every rank of this node", self._progress.directory)
            return bool(super()._reap_worker(worker_pid, signal))

    return StackingTimerServer


def _overran(pid: int, rank: LocalRank | None, request: Any) -> str:
    who = f"rank {rank.rank} (local rank {rank.local_rank}, pid {pid})" if rank is not None else f"worker pid {pid}"
    scope = f" {request.scope_id!r}" if request is not None and request.scope_id else ""
    return f"{who} overran its expires() block{scope}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

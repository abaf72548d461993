"""What ``torchx run --wait`` says while it waits: one short line each time what it waits for
changes (the pending reason and the time in the queue, then where the job runs, restarts).

On a terminal the current line is redrawn in place with the elapsed time ticking; into a pipe or
a file (or between streamed log lines) each change is one plain line. ``progress_of`` is pure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TextIO

from torchx.specs import AppState, AppStatus, is_terminal

WAITING = {AppState.UNSUBMITTED: "not submitted yet", AppState.SUBMITTED: "submitted",
           AppState.PENDING: "pending"}
MOST_PLACES_SHOWN = 4


@dataclass(frozen=True)
class Progress:
    """What a waiting person is told; a new line is printed when it changes."""

    state: AppState
    detail: str

    def line(self, elapsed_s: float) -> str:
        if self.state in WAITING:
            reason = f" ({self.detail})" if self.detail else ""
            return f"torchx: {WAITING[self.state]}{reason}, {_seconds(elapsed_s)} since submission"
        return f"torchx: {self.detail} ({_seconds(elapsed_s)} since submission)"


def progress_of(status: AppStatus) -> Progress | None:
    """The progress ``status`` shows; None once the job has ended (its end is said elsewhere)."""
    if status.is_terminal():
        return None
    if status.state in WAITING:
        return Progress(status.state, _pending_reason(status.msg))
    places = [(f"{role.role}/{replica.id}", replica.hostname, replica.state)
              for role in status.roles for replica in role.replicas]
    running = [(name, host) for name, host, state in places if state == AppState.RUNNING]
    ended = [name for name, _, state in places if is_terminal(state)]
    waiting = [name for name, _, state in places if state != AppState.RUNNING and not is_terminal(state)]
    if not running and not waiting and ended:
        return None  # every replica has ended: the job's end follows in a moment
    if running:
        detail = "running " + ", ".join(f"{name} on {host or '?'}" for name, host in running[:MOST_PLACES_SHOWN])
        if len(running) > MOST_PLACES_SHOWN:
            hosts = {host for _, host in running}
            detail = (f"running {len(running)} replicas on {len(hosts)} host{'s' if len(hosts) != 1 else ''} "
                      f"({detail.removeprefix('running ')}, ...)")
        if waiting:
            detail += f"; not running yet: {_names(waiting)}"
    else:
        detail = f"starting {_names(waiting)}" if waiting else "starting"
    if ended:
        detail += f"; ended: {_names(ended)}"
    if status.num_restarts:
        detail += f"; {status.num_restarts} restart{'s' if status.num_restarts != 1 else ''} so far"
    return Progress(status.state, detail)


def _names(names: list[str]) -> str:
    return ", ".join(names[:MOST_PLACES_SHOWN]) + (", ..." if len(names) > MOST_PLACES_SHOWN else "")


def _pending_reason(msg: str) -> str:
    text = (msg or "").strip().splitlines()[0] if (msg or "").strip() else ""
    return text.removeprefix("pending: ").strip()


def _seconds(elapsed_s: float) -> str:
    if elapsed_s < 10:
        return f"{elapsed_s:.1f} s"
    if elapsed_s < 120:
        return f"{elapsed_s:.0f} s"
    return f"{int(elapsed_s // 60)} min {int(elapsed_s % 60)} s"


class ProgressPrinter:
    """Prints ``Progress`` lines to ``stream``; ``in_place``: redraw the current line (a terminal
    that nothing else writes to meanwhile)."""

    def __init__(self, stream: TextIO, in_place: bool, since: float | None = None) -> None:
        self.stream = stream
        self.in_place = in_place
        self.since = time.monotonic() if since is None else since
        self._shown: Progress | None = None

    def show(self, status: AppStatus) -> None:
        progress = progress_of(status)
        if progress is None or progress == self._shown:
            return
        if self.in_place and self._shown is not None:
            self.stream.write("\n")  # the previous line stays, with its last elapsed time
        self._shown = progress
        self._draw(end="" if self.in_place else "\n")

    def tick(self) -> None:
        """Redraws the current line with the time elapsed now (in place only)."""
        if self.in_place and self._shown is not None:
            self._draw(end="")

    def close(self) -> None:
        if self.in_place and self._shown is not None:
            self.stream.write("\n")
            self.stream.flush()
        self._shown = None

    def _draw(self, end: str) -> None:
        assert self._shown is not None
        prefix = "\r\x1b[K" if self.in_place else ""
        self.stream.write(f"{prefix}{self._shown.line(time.monotonic() - self.since)}{end}")
        self.stream.flush()

"""The hang watchdog's decisions, apart from the threads and the store that feed them.

A job hangs when no rank of it has moved (``worker_progress.py``: its main thread's Python stack
changed) for ``timeout_s``. Each launcher adds to one counter in the round's store whenever one
of its ranks moved since its last look, and judges that counter on its own monotonic clock: no
clock is compared between hosts, and a node's load is two store operations per look at any scale.
A rank inside a block its worker timed with ``torch.distributed.elastic.timer.expires`` counts as
moving: the worker's own timer decides there, never the watchdog.

``StuckAttempts`` decides when restarting is pointless: attempts that each hang at the point the
one before hung (they moved for about as long before stopping, as a job resumed from the same
checkpoint does) stop the job after ``STUCK_ATTEMPTS`` of them, whatever restarts are left.

Pure: every method takes the time it is asked at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


LOOKS_PER_TIMEOUT = 15
MAX_LOOK_S = 2.0
STUCK_ATTEMPTS = 3
"""Attempts in a row that stop at the same point before the job stops restarting."""
SAME_POINT_SHARE = 0.25
"""Two attempts stopped at the same point when their moving times differ by at most this share of
the longer one, plus two looks."""


def look_interval(timeout_s: float) -> float:
    """How often a launcher looks at its ranks and the job's counter."""
    return min(MAX_LOOK_S, timeout_s / LOOKS_PER_TIMEOUT)


class HangJudge:
    """Tells, from the job's progress counter and when it was read, whether the job hangs.

    Judges only while this node's workers run and some rank of the job has reported (a job whose
    workers are not Python, or not started yet, is never called hung)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._count = 0
        self._moved_at: float | None = None
        self.moved_looks = 0
        """Looks at which the job had moved since the one before: how long it kept moving."""

    def saw(self, job_count: int, workers_running: bool, now: float) -> None:
        if job_count != self._count:
            self.moved_looks += 1
        if not workers_running or job_count <= 0:
            self._moved_at = None
        elif self._moved_at is None or job_count != self._count:
            self._moved_at = now
        self._count = job_count

    def restart(self, now: float) -> None:
        """This process was frozen itself: the stillness it measured is its own."""
        if self._moved_at is not None:
            self._moved_at = now

    def still_for(self, now: float) -> float | None:
        """Seconds no rank has moved, once that is the timeout or longer."""
        if self._moved_at is None:
            return None
        still = now - self._moved_at
        return still if still >= self.timeout_s else None


@dataclass
class StuckAttempts:
    """The attempts that ended in a hang, each by how long its job kept moving (in looks)."""

    looks: list[int] = field(default_factory=list)

    def ended_hung(self, moved_looks: int) -> None:
        if self.looks and not same_point(self.looks[-1], moved_looks):
            self.looks.clear()
        self.looks.append(moved_looks)

    def ended_otherwise(self) -> None:
        self.looks.clear()

    def stuck(self) -> bool:
        return len(self.looks) >= STUCK_ATTEMPTS

    def to_text(self) -> str:
        return json.dumps({"format": 1, "looks": self.looks})

    @staticmethod
    def from_text(text: str) -> StuckAttempts:
        """What ``to_text`` wrote; an unreadable or other record is no attempt at all."""
        try:
            data = json.loads(text)
            looks = [int(value) for value in data["looks"]] if data.get("format") == 1 else []
        except (ValueError, TypeError, KeyError, AttributeError):
            looks = []
        return StuckAttempts(looks)


def same_point(before: int, now: int) -> bool:
    return abs(before - now) <= SAME_POINT_SHARE * max(before, now) + 2

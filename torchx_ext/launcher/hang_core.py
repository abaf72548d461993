"""The hang watchdog's decisions, apart from the threads and the store that feed them.

A job hangs when no rank of it has moved (``worker_progress.py``: its main thread's Python stack
changed) for ``timeout_s``. Each launcher adds to one counter in the round's store whenever one
of its ranks moved since its last look, and judges that counter on its own monotonic clock: no
clock is compared between hosts, and a node's load is a few store operations per look at any scale.
A rank inside a block its worker timed with ``torch.distributed.elastic.timer.expires`` counts as
moving: the worker's own timer decides there, never the watchdog.

``StuckAttempts`` decides when restarting is pointless: attempts that each hang or fail at the
point the one before did (they moved for about as long before stopping, as a job resumed from the
same checkpoint does) stop the job after ``STUCK_ATTEMPTS`` of them, whatever restarts are left.

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

    def postpone(self, now: float) -> None:
        """A worker of the job failed: its node's agent ends the round. The stillness that follows is
        that failure's, so a hang is declared only after another timeout (a failed worker that
        never exits)."""
        if self._moved_at is not None:
            self._moved_at = now

    def still_for(self, now: float) -> float | None:
        """Seconds no rank has moved, once that is the timeout or longer."""
        if self._moved_at is None:
            return None
        still = now - self._moved_at
        return still if still >= self.timeout_s else None


HUNG, FAILED = "hung", "failed"
"""How an attempt that counts towards ``StuckAttempts`` ended: the watchdog or a worker's timer
decided a hang, or a worker's code raised (or exited with a code other than 0)."""


@dataclass
class StuckAttempts:
    """The attempts in a row that ended at one point, each as how it ended (``HUNG``, ``FAILED``)
    and how long its job kept moving (in looks)."""

    ends: list[tuple[str, int]] = field(default_factory=list)
    last_failure: str = ""
    """The last failed attempt's first error line, for the line that stops the job."""

    def ended_at_a_point(self, how: str, moved_looks: int, failure: str = "") -> None:
        if self.ends and not same_point(self.ends[-1][1], moved_looks):
            self.ends.clear()
        self.ends.append((how, moved_looks))
        if how == FAILED:
            self.last_failure = failure

    def ended_otherwise(self) -> None:
        self.ends.clear()

    def stuck(self) -> bool:
        return len(self.ends) >= STUCK_ATTEMPTS

    def line(self) -> str:
        """What the launcher that stops says: how the attempts ended, and the last error."""
        kinds = {how for how, _ in self.ends}
        how = " or ".join(kind for kind in (HUNG, FAILED) if kind in kinds) or HUNG
        last = f"; the last: {self.last_failure}" if FAILED in kinds and self.last_failure else ""
        return (f"stopped restarting: {len(self.ends)} attempts in a row {how} at the same point (each kept moving "
                f"for about as long as the one before{last})")

    def to_text(self) -> str:
        return json.dumps({"format": 2, "ends": [list(end) for end in self.ends], "last_failure": self.last_failure})

    @staticmethod
    def from_text(text: str) -> StuckAttempts:
        """What ``to_text`` wrote (format 1: hangs only); an unreadable or other record is no attempt at all."""
        try:
            data = json.loads(text)
            if data.get("format") == 1:
                return StuckAttempts([(HUNG, int(value)) for value in data["looks"]])
            if data.get("format") == 2:
                ends = [(str(how), int(looks)) for how, looks in data["ends"]]
                if all(how in (HUNG, FAILED) for how, _ in ends):
                    return StuckAttempts(ends, str(data.get("last_failure", "")))
        except (ValueError, TypeError, KeyError, AttributeError):
            pass
        return StuckAttempts()


def same_point(before: int, now: int) -> bool:
    return abs(before - now) <= SAME_POINT_SHARE * max(before, now) + 2

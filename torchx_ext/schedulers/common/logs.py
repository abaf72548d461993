"""``torchx log`` queries, checked once and applied to any backend's timed lines.

A backend supplies a replica's lines with the time each arrived (local log indexes, Docker's
timestamps, the Kubernetes API's); ``LogQuery`` validates ``since``/``until``/``regex``/
``streams`` before anything is read and decides which lines to show.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from torchx_ext.errors import InvalidArgumentError

STREAMS = ("stdout", "stderr", "combined")


@dataclass(frozen=True)
class LogQuery:
    stream: str
    """One of STREAMS; torchx's ``streams=None`` means combined."""
    since: float | None = None
    until: float | None = None
    pattern: re.Pattern[str] | None = None
    should_tail: bool = False

    @staticmethod
    def of(
        regex: str | None = None,
        since: datetime.datetime | None = None,
        until: datetime.datetime | None = None,
        streams: object = None,
        should_tail: bool = False,
    ) -> "LogQuery":
        """The query for ``log_iter``'s arguments; InvalidArgumentError names a bad one."""
        stream = "combined" if streams is None else str(getattr(streams, "value", streams))
        if stream not in STREAMS:
            raise InvalidArgumentError(f"unknown stream {streams!r}: valid values are {', '.join(STREAMS)}")
        pattern = None
        if regex is not None:
            try:
                pattern = re.compile(regex)
            except re.error as error:
                raise InvalidArgumentError(f"invalid log regex {regex!r}: {error}") from None
        start, end = (moment.timestamp() if moment is not None else None for moment in (since, until))
        if start is not None and end is not None and end < start:
            raise InvalidArgumentError(f"log window ends ({until}) before it starts ({since}): give since <= until")
        return LogQuery(stream, start, end, pattern, should_tail)

    def wants(self, arrived: float, line: str) -> bool:
        if self.since is not None and arrived < self.since:
            return False
        if self.until is not None and arrived > self.until:
            return False
        return self.pattern is None or self.pattern.search(line) is not None

    def select(self, timed_lines: Iterable[tuple[float, str]]) -> Iterator[str]:
        """The lines (with their ``\\n``) this query shows, from (arrival time, line) pairs."""
        return (line for arrived, line in timed_lines if self.wants(arrived, line))

"""A pod's log as (time, line) pairs from the API's timestamped stream (``timestamps=true``
prefixes every line with its RFC 3339 time), whole across the stream's chunks."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator

from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.schedulers.kubernetes.view import rfc3339

# sinceSeconds is whole seconds back from the server's clock: ask for a little more and let
# LogQuery decide exactly by each line's own time.
_WINDOW_MARGIN_S = 2


def since_seconds(query: LogQuery) -> int | None:
    if query.since is None:
        return None
    return max(1, math.ceil(time.time() - query.since) + _WINDOW_MARGIN_S)


def timed_lines(lines: Iterable[bytes], until: float | None = None) -> Iterator[tuple[float, str]]:
    """(time, line) for each ``TIMESTAMP line`` of the stream; stops at the first line after
    ``until`` (a followed log would otherwise never end)."""
    previous = 0.0
    for raw in lines:
        stamp, separator, payload = raw.partition(b" ")
        moment = _time(stamp) if separator else None
        if moment is None:  # not a timestamped line: keep it whole, with the previous line's time
            moment, payload = previous, raw
        previous = moment
        if until is not None and moment > until:
            return
        text = payload.decode(errors="replace")
        yield moment, text if text.endswith("\n") else text + "\n"


def _time(stamp: bytes) -> float | None:
    try:
        return rfc3339(stamp.decode())
    except (ValueError, UnicodeDecodeError):
        return None

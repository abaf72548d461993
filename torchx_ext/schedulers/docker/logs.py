"""A container's log as (arrival time, line) pairs, from the engine's timestamped log stream.

The engine stores each write as one message and prefixes it with its time (RFC 3339, in
nanoseconds) when asked; a line longer than its message size limit comes as several messages,
the first ones not ending in a newline. Lines are put back together here, so a line is never
cut at a message boundary, and each line takes the time of its first piece.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.schedulers.docker.view import engine_time

# The engine filters since/until in whole seconds on some versions: ask for a little more,
# and let LogQuery decide exactly.
_WINDOW_MARGIN_S = 1.0


def container_lines(client: Any, container_id: str, query: LogQuery) -> Iterator[tuple[float, str]]:
    kwargs: dict[str, Any] = {
        "stdout": query.stream in ("stdout", "combined"),
        "stderr": query.stream in ("stderr", "combined"),
        "timestamps": True,
        "stream": True,
        "follow": query.should_tail,
    }
    if query.since is not None:
        kwargs["since"] = max(0, int(query.since - _WINDOW_MARGIN_S))
    if query.until is not None:
        kwargs["until"] = int(query.until + _WINDOW_MARGIN_S) + 1
    return timed_lines(client.api.logs(container_id, **kwargs))


def timed_lines(messages: Iterable[bytes]) -> Iterator[tuple[float, str]]:
    """Lines (each ending in a newline) from timestamped messages."""
    pending = b""
    started = 0.0
    for message in messages:
        stamp, _, payload = message.partition(b" ")
        if not pending:
            started = engine_time(stamp.decode(errors="replace")) or 0.0
        pending += payload
        if pending.endswith(b"\n"):
            for line in pending.splitlines(keepends=True):
                yield started, line.decode(errors="replace")
            pending = b""
    if pending:
        yield started, pending.decode(errors="replace") + "\n"

"""Standard streams that several threads may write to at once without mangling each other.

With ``--tee``, torch's agent copies every worker's output to the launcher's stdout/stderr
from one thread per worker, while its logging writes there too. CPython 3.11's TextIOWrapper
is not safe for that: when the reader of the pipe is slow (a container engine's log driver),
concurrent writes duplicate, drop or corrupt pieces of lines (seen here: raw memory bytes in
``docker logs``). Every write and flush goes through one lock per stream instead.

torch's tee does not flush either, so on a pipe (a container's stdout, a supervisor's) a
worker's line would wait in the launcher's buffer for 8 KiB more: the streams are made line
buffered, as on a terminal, so ``docker logs`` and ``torchx log`` show each line as it comes.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TextIO


class LockedTextStream:
    """A text stream whose writes and flushes are serialised; everything else is the wrapped one's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            return self._stream.write(text)

    def writelines(self, lines: Any) -> None:
        with self._lock:
            self._stream.writelines(lines)

    def flush(self) -> None:
        with self._lock:
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def lock_standard_streams() -> None:
    """Wrap sys.stdout and sys.stderr (once), before any thread or handler holds them."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, LockedTextStream):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True)
            setattr(sys, name, LockedTextStream(stream))

"""Log files with the time each piece arrived, and reading them back by line.

Next to each log file lies an index ``<file>.idx`` of ``<byte offset> <unix time>`` lines:
where each piece starts and when it came. A line's time is the time of the piece its first
byte came in, which is what ``since``/``until`` filter on. local_cwd's supervisor appends what
a replica writes to ``stdout.log``/``stderr.log`` and, in arrival order, ``combined.log`` (the
files torchx's local scheduler writes); slurm's step program passes a replica's streams on to
the files ``srun --output/--error`` write and indexes them, and writes the combined file itself.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from torchx_ext.schedulers.common.logs import STREAMS

TAIL_POLL_S = 0.1


class IndexedLog:
    """Appends to ``path`` and its index; with ``passthrough``, the bytes go to that file
    descriptor instead, whose reader appends them to ``path`` (srun's ``--output``)."""

    def __init__(self, path: Path, passthrough: int | None = None) -> None:
        # Unbuffered: a reader in another process sees every piece as soon as it is written.
        self._passthrough = passthrough
        self._log = open(path, "ab", buffering=0) if passthrough is None else None
        self._index = open(f"{path}.idx", "ab", buffering=0)
        self._size = path.stat().st_size if path.exists() else 0

    def write(self, data: bytes, now: float) -> None:
        self._index.write(f"{self._size} {now:.6f}\n".encode())
        if self._log is not None:
            self._log.write(data)
        else:
            assert self._passthrough is not None
            view = memoryview(data)
            while view:
                view = view[os.write(self._passthrough, view):]
        self._size += len(data)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
        self._index.close()


class ReplicaLogWriter:
    """local_cwd's three files of a replica; restarts of the replica append to the same files."""

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._logs = {stream: IndexedLog(log_dir / f"{stream}.log") for stream in STREAMS}

    def write(self, stream: str, data: bytes) -> None:
        now = time.time()
        for name in (stream, "combined"):
            self._logs[name].write(data, now)

    def close(self) -> None:
        for log in self._logs.values():
            log.close()


def read_timed_lines(
    path: Path,
    *,
    should_tail: bool = False,
    finished: Callable[[], bool] = lambda: True,
) -> Iterator[tuple[float, str]]:
    """The lines of ``path`` (each with its ``\\n``) with the time each arrived; with
    ``should_tail``, keeps following the file until ``finished()`` is true."""
    index = _Index(Path(f"{path}.idx"))
    position = 0  # offset of the first byte of ``pending``
    pending = b""
    final_pass = False
    while not path.exists():  # the supervisor has not started the replica yet
        if not should_tail or finished():
            return
        time.sleep(TAIL_POLL_S)
    with open(path, "rb") as file:
        while True:
            chunk = file.read(1 << 20)
            if chunk:
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                for raw in lines:
                    yield index.time_of(position), raw.decode(errors="replace") + "\n"
                    position += len(raw) + 1
                continue
            # At the end of what is written: stop, or wait for more while the job runs.
            if should_tail and not finished():
                time.sleep(TAIL_POLL_S)
                continue
            if should_tail and not final_pass:
                final_pass = True  # the job has ended: read what it wrote last, then stop
                continue
            break
    if pending:
        yield index.time_of(position), pending.decode(errors="replace")


class _Index:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._offsets: list[int] = []
        self._times: list[float] = []
        self._read = 0

    def time_of(self, offset: int) -> float:
        if not self._offsets or offset > self._offsets[-1]:
            self._load_more()
        where = bisect.bisect_right(self._offsets, offset) - 1
        if where < 0:
            return self._times[0] if self._times else time.time()
        return self._times[where]

    def _load_more(self) -> None:
        try:
            with open(self._path, "rb") as file:
                file.seek(self._read)
                data = file.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        self._read += len(complete)
        for entry in complete.splitlines():
            offset, moment = entry.split()
            self._offsets.append(int(offset))
            self._times.append(float(moment))

"""Pod logs from Docker's log stream, reformatted as the kubelet serves them.

Docker gives each log entry as one frame prefixed by an RFC 3339 timestamp with nine fractional
digits in UTC, exactly the kubelet's format, so timestamps are passed through or cut off, and since
filters compare the fixed-width text. Output goes in large chunks: a pod may log 100 000 lines and
one HTTP write per line would be far too slow."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from tests.kubernetes.apiserver import errors
from tests.kubernetes.apiserver.store import parse_rfc3339

CHUNK = 256 * 1024
STAMP = len("2006-01-02T15:04:05.000000000Z")


def _stamp(moment: datetime) -> bytes:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z").encode()


def flag(query: dict[str, str], key: str) -> bool:
    """Booleans as Go's ParseBool reads them: the Python client sends ``True``, kubectl ``true``."""
    return query.get(key, "").lower() in ("1", "t", "true")


def since_stamp(query: dict[str, str]) -> bytes | None:
    """The earliest timestamp to show, from sinceSeconds or sinceTime."""
    try:
        if "sinceSeconds" in query:
            return _stamp(datetime.now(timezone.utc) - timedelta(seconds=int(query["sinceSeconds"])))
        if "sinceTime" in query:
            return _stamp(parse_rfc3339(query["sinceTime"]))
    except ValueError as error:
        raise errors.bad_request(f"invalid log options: {error}") from error
    return None


def stream_logs(docker_api: Any, container_id: str, query: dict[str, str], follow_allowed: bool) -> Iterator[bytes]:
    follow = flag(query, "follow") and follow_allowed
    params: dict[str, Any] = {"stdout": 1, "stderr": 1, "timestamps": 1, "follow": int(follow),
                              "tail": query.get("tailLines") or "all"}
    since = since_stamp(query)
    if since is not None:
        # Whole seconds at Docker, exact filtering here.
        params["since"] = int(parse_rfc3339(since.decode()[:19] + "Z").timestamp())
    # The SDK reads the multiplexed stream one frame at a time (two socket reads each): far too slow
    # for 100 000 lines. Read the HTTP body in large pieces and cut the frames out here instead.
    response = docker_api._get(docker_api._url("/containers/{0}/logs", container_id), params=params, stream=True)
    docker_api._raise_for_status(response)
    limit = int(query["limitBytes"]) if query.get("limitBytes") else None
    return _format(response, flag(query, "timestamps"), since, limit)


def _frames(buffer: bytes, keep_stamp: bool, since: bytes | None) -> tuple[list[bytes], int]:
    """Payloads of the complete frames in ``buffer`` (8-byte header: stream, 0, 0, 0, size) and
    how many bytes they used. Each payload is one entry: ``<30-character stamp> <text>``."""
    out: list[bytes] = []
    position, end = 0, len(buffer)
    while end - position >= 8:
        size = int.from_bytes(buffer[position + 4:position + 8], "big")
        start = position + 8
        if end - start < size:
            break
        if since is None or buffer[start:start + STAMP] >= since:
            out.append(buffer[start:start + size] if keep_stamp else buffer[start + STAMP + 1:start + size])
        position = start + size
    return out, position


class _Pump:
    """Reads the Docker response on its own thread. Docker sends every entry as its own HTTP chunk,
    so relaying chunk by chunk would mean one write per line; the reader instead takes whatever has
    arrived since its last turn, which is everything when catching up and each line when following."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self._buffer = bytearray()
        self._done = False
        self._ready = threading.Condition()
        threading.Thread(target=self._run, name="fake-kubelet-logs", daemon=True).start()

    def _run(self) -> None:
        try:
            for data in self._response.raw.stream(CHUNK, decode_content=False):
                with self._ready:
                    self._buffer += data
                    self._ready.notify()
        except Exception:
            pass  # closed by the reader, or the container went away
        finally:
            with self._ready:
                self._done = True
                self._ready.notify()

    def take(self) -> bytes | None:
        """What arrived since the last call (waiting for something); None at the end."""
        with self._ready:
            self._ready.wait_for(lambda: bool(self._buffer) or self._done)
            if not self._buffer:
                return None
            data = bytes(self._buffer)
            self._buffer.clear()
            return data

    def close(self) -> None:
        self._response.close()


def _format(response: Any, timestamps: bool, since: bytes | None, limit: int | None) -> Iterator[bytes]:
    pump = _Pump(response)
    buffer, sent = b"", 0
    try:
        while (data := pump.take()) is not None:
            buffer += data
            entries, used = _frames(buffer, timestamps, since)
            buffer = buffer[used:]
            out = b"".join(entries)
            if limit is not None:
                out = out[: max(limit - sent, 0)]
            sent += len(out)
            if out:
                yield out
            if limit is not None and sent >= limit:
                return
    finally:
        pump.close()

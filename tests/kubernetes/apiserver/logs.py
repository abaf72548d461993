"""Pod logs from Docker's log stream, reformatted as the kubelet serves them.

Docker gives each log entry as one frame prefixed by an RFC 3339 timestamp with nine fractional
digits in UTC, exactly the kubelet's format, so timestamps are passed through or cut off, and since
filters compare the fixed-width text. Output is gathered into large chunks: a pod may log 100 000
lines and one HTTP write per line would be far too slow."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from tests.kubernetes.apiserver import errors
from tests.kubernetes.apiserver.store import parse_rfc3339

CHUNK = 256 * 1024


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
    timestamps = flag(query, "timestamps")
    since = since_stamp(query)
    limit = int(query["limitBytes"]) if query.get("limitBytes") else None
    kwargs: dict[str, Any] = {"stream": True, "follow": follow, "timestamps": True}
    if query.get("tailLines"):
        kwargs["tail"] = int(query["tailLines"])
    if since is not None:
        # Whole seconds at Docker, exact filtering here.
        kwargs["since"] = int(parse_rfc3339(since.decode()[:19] + "Z").timestamp())
    frames = docker_api.logs(container_id, **kwargs)
    return _format(frames, timestamps, since, limit, follow)


def _format(frames: Any, timestamps: bool, since: bytes | None, limit: int | None, follow: bool) -> Iterator[bytes]:
    pending: list[bytes] = []
    size = sent = 0
    try:
        for frame in frames:
            # A frame may hold several entries when Docker coalesces them; each line has its stamp.
            for entry in frame.splitlines(keepends=True):
                stamp, _, text = entry.partition(b" ")
                if since is not None and stamp < since:
                    continue
                piece = entry if timestamps else text
                pending.append(piece)
                size += len(piece)
            # Following: send what arrived at once; otherwise wait for a large chunk.
            if size >= CHUNK or (follow and size):
                data = b"".join(pending)
                pending, size = [], 0
                if limit is not None:
                    data = data[: max(limit - sent, 0)]
                sent += len(data)
                yield data
                if limit is not None and sent >= limit:
                    return
        data = b"".join(pending)
        if limit is not None:
            data = data[: max(limit - sent, 0)]
        yield data
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()

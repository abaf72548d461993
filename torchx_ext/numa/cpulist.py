"""The kernel's cpulist syntax (``0-3,8,10-11``), as in sysfs and ``taskset -c``."""

from __future__ import annotations

from collections.abc import Iterable

from torchx_ext.errors import InvalidArgumentError

CPULIST_FORMS = "comma-separated CPU numbers and ranges, e.g. '0-3,8,10-11' (or 'A-B:USED/GROUP')"


def parse_cpulist(text: str, *, source: str = "cpulist") -> frozenset[int]:
    """Parse a cpulist; an empty or blank string is the empty set.

    ``source`` names where the text came from (a flag, a sysfs file) for the error message.
    """
    cpus: set[int] = set()
    for raw_chunk in text.strip().split(","):
        chunk = raw_chunk.strip()
        if not chunk:
            if text.strip():
                raise _malformed(text, source)
            continue
        cpus.update(_parse_chunk(chunk, text, source))
    return frozenset(cpus)


def _parse_chunk(chunk: str, text: str, source: str) -> range | list[int]:
    span, colon, stride = chunk.partition(":")
    first_text, dash, last_text = span.partition("-")
    first = _non_negative_int(first_text, text, source)
    last = _non_negative_int(last_text, text, source) if dash else first
    if last < first:
        raise _malformed(text, source, f"range {span!r} runs backwards")
    if not colon:
        return range(first, last + 1)
    used_text, slash, group_text = stride.partition("/")
    if not slash:
        raise _malformed(text, source)
    used = _non_negative_int(used_text, text, source)
    group = _non_negative_int(group_text, text, source)
    if used == 0 or group == 0 or used > group:
        raise _malformed(text, source, f"stride {stride!r} needs 0 < USED <= GROUP")
    return [cpu for cpu in range(first, last + 1) if (cpu - first) % group < used]


def _non_negative_int(text: str, whole: str, source: str) -> int:
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):
        raise _malformed(whole, source)
    return int(stripped)


def _malformed(text: str, source: str, detail: str = "") -> InvalidArgumentError:
    reason = f" ({detail})" if detail else ""
    return InvalidArgumentError(
        f"malformed {source} {text!r}{reason}: expected {CPULIST_FORMS}"
    )


def format_cpulist(cpus: Iterable[int]) -> str:
    """The shortest cpulist for a set of CPUs; ``""`` for the empty set."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[start], ordered[end]
        ranges.append(str(first) if first == last else f"{first}-{last}")
        start = end + 1
    return ",".join(ranges)

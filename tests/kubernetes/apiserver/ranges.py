"""Index sets as Job status and successPolicy write them: "0-2,5"."""

from __future__ import annotations

from collections.abc import Iterable


def compress(indexes: Iterable[int]) -> str:
    runs: list[list[int]] = []
    for index in sorted(set(indexes)):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def expand(text: str | None) -> set[int]:
    indexes: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if part:
            first, _, last = part.partition("-")
            indexes.update(range(int(first), int(last or first) + 1))
    return indexes

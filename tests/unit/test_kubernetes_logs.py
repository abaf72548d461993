"""A pod's timestamped log stream back into whole lines, whatever the chunks' boundaries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchx_ext.schedulers.kubernetes.client import lines_of
from torchx_ext.schedulers.kubernetes.logs import timed_lines


class ChunkedBody:
    """What the client returns for a streamed log (urllib3's response): its body in the given
    chunks, empty ones included (a follow stream sends those while it waits)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.released = False

    def stream(self, amount: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks

    def release_conn(self) -> None:
        self.released = True


def stamped(lines: list[str]) -> bytes:
    return b"".join(f"2026-11-24T10:00:{second:02d}.{second:06d}Z {line}\n".encode()
                    for second, line in enumerate(lines))


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(body), *(cut % (len(body) + 1) for cut in cuts)})
    return [body[start:end] for start, end in zip(points, points[1:])]


LINE = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r"), max_size=30)


@settings(deadline=None)  # timing is not what this checks (CI machines are busy)
@given(lines=st.lists(LINE, min_size=1, max_size=20), cuts=st.lists(st.integers(0, 2000), max_size=30),
       empties=st.booleans())
def test_every_line_comes_back_whole_with_its_time_and_newline(lines: list[str], cuts: list[int], empties: bool) -> None:
    chunks = split(stamped(lines), cuts)
    if empties:
        chunks = [part for chunk in chunks for part in (chunk, b"")]
    body = ChunkedBody(chunks)

    timed = list(timed_lines(lines_of(body)))

    assert [text for _, text in timed] == [line + "\n" for line in lines]
    assert [moment % 60 for moment, _ in timed] == pytest.approx([second + second / 1e6 for second in range(len(lines))])
    assert body.released


def test_a_last_line_without_newline_keeps_one_and_until_ends_a_followed_stream() -> None:
    body = stamped(["first", "second", "third"])[:-1]  # the pod's last write had no newline
    assert [text for _, text in timed_lines(lines_of(ChunkedBody([body])))] == ["first\n", "second\n", "third\n"]

    until = list(timed_lines(lines_of(ChunkedBody([body])), until=1_795_514_401.5))
    assert [text for _, text in until] == ["first\n", "second\n"]


def test_a_line_that_is_not_timestamped_is_kept_whole() -> None:
    body = b"2026-11-24T10:00:00Z one\nunable to retrieve container logs\n"
    timed = list(timed_lines(lines_of(ChunkedBody([body]))))
    assert [text for _, text in timed] == ["one\n", "unable to retrieve container logs\n"]
    assert timed[1][0] == timed[0][0]  # the previous line's time: since/until treat it alike

"""The watchdog's judge and its settings, on a clock of the test's own."""

from __future__ import annotations

import pytest

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.launcher.rendezvous.config import peer_timeout
from torchx_ext.launcher.rendezvous.watchdog import DEFAULT_TIMEOUT_S, Judge, watched_ranks


def test_each_rank_watches_its_next_two_ranks_around_the_ring() -> None:
    assert watched_ranks(0, 2) == [1]
    assert watched_ranks(1, 2) == [0]
    assert watched_ranks(3, 4) == [0, 1]
    assert watched_ranks(0, 1) == []
    # every rank is watched by two others
    watchers = [rank for watcher in range(8) for rank in watched_ranks(watcher, 8)]
    assert sorted(watchers) == sorted(list(range(8)) * 2)


def test_a_peer_whose_counter_moves_is_never_lost() -> None:
    judge = Judge([1, 2], timeout_s=10, now=0)
    for second in range(1, 100):
        judge.store_answered(second)
        judge.saw(1, second, second)
        judge.saw(2, second, second)
        assert judge.silent_peer(second) is None and judge.silent_store(second) is None


def test_a_peer_whose_counter_stops_is_lost_after_the_timeout_counted_from_its_last_move() -> None:
    judge = Judge([1, 2], timeout_s=10, now=0)
    for second in range(1, 30):
        judge.store_answered(second)
        judge.saw(1, second, second)
        judge.saw(2, min(second, 5), second)  # rank 2 froze after its beat at 5 s
        if second <= 15:
            assert judge.silent_peer(second) is None
    assert judge.silent_peer(15.5) == (2, 10.5)
    assert judge.silent_store(15.5) is None


def test_a_peer_that_never_beats_is_lost_a_timeout_after_the_round_began() -> None:
    judge = Judge([1], timeout_s=10, now=100)
    judge.store_answered(109)
    assert judge.silent_peer(109) is None
    assert judge.silent_peer(111) == (1, 11)


def test_a_store_that_stops_answering_is_lost_after_the_timeout() -> None:
    judge = Judge([1], timeout_s=10, now=0)
    judge.store_answered(4)
    assert judge.silent_store(14) is None
    assert judge.silent_store(14.5) == 10.5


@pytest.mark.parametrize(
    "flag, conf, expected",
    [(None, {}, DEFAULT_TIMEOUT_S), ("30", {}, 30.0), (None, {"peer_timeout": "5"}, 5.0),
     ("0", {"peer_timeout": "5"}, 0.0), (None, {"peer_timeout": "0"}, 0.0)],
)
def test_the_flag_wins_over_the_rdzv_conf_key(flag: str | None, conf: dict[str, str], expected: float) -> None:
    assert peer_timeout(flag, conf) == expected


@pytest.mark.parametrize("value", ["", "ten", "-1", "0.5", "nan", "inf", "86401"])
def test_a_bad_timeout_names_the_value_and_the_valid_forms(value: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        peer_timeout(value, {})
    assert str(raised.value) == (
        f"invalid --peer-timeout {value!r}: expected seconds from 1 to 86400 (a peer silent that long "
        "is lost), or 0 for no watchdog"
    )


def test_a_judge_that_was_frozen_itself_counts_silences_afresh() -> None:
    judge = Judge([1], timeout_s=10, now=0)
    judge.store_answered(1)
    judge.saw(1, 1, 1)
    judge.restart(60)  # thawed a minute later: nobody else was silent for that minute
    assert judge.silent_store(65) is None and judge.silent_peer(65) is None
    assert judge.silent_peer(71) == (1, 11)

"""The hang watchdog's decisions (launcher/hang_core.py), on a clock the tests drive."""

from __future__ import annotations

import pytest

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.launcher.hang_core import FAILED, HUNG, STUCK_ATTEMPTS, HangJudge, StuckAttempts, look_interval
from torchx_ext.options import DEFAULT_HANG_TIMEOUT_S, parse_hang_timeout


def _looks(judge: HangJudge, counts: list[int], start: float = 0.0, every: float = 2.0,
           running: bool = True) -> list[float | None]:
    return [_saw(judge, count, start + index * every, running) for index, count in enumerate(counts)]


def _saw(judge: HangJudge, count: int, now: float, running: bool = True) -> float | None:
    judge.saw(count, running, now)
    return judge.still_for(now)


def test_a_job_whose_counter_stops_hangs_once_it_stood_still_for_the_timeout() -> None:
    judge = HangJudge(30)
    verdicts = _looks(judge, [1, 2, 3, 4] + [4] * 16)  # moves until t=6, then stands still
    assert verdicts[:18] == [None] * 18  # t=34 is 28 s after the last move
    assert verdicts[18] == pytest.approx(30.0)  # t=36
    assert verdicts[19] == pytest.approx(32.0)


def test_any_move_anywhere_in_the_job_starts_the_stillness_again() -> None:
    judge = HangJudge(30)
    counts = [1] * 14 + [2] + [2] * 14  # one node saw one rank move at t=28
    assert all(verdict is None for verdict in _looks(judge, counts))


def test_no_judgement_before_any_rank_reported_or_while_this_nodes_workers_are_not_running() -> None:
    judge = HangJudge(10)
    # Workers not Python (no rank ever reports): never a hang.
    assert all(verdict is None for verdict in _looks(judge, [0] * 50))
    # This node's workers stopped (they finished, or a rendezvous is under way): the clock starts again.
    judge = HangJudge(10)
    _looks(judge, [5] * 5)  # still for 8 s
    assert _saw(judge, 5, 10.0, running=False) is None
    assert _saw(judge, 5, 12.0) is None
    assert _saw(judge, 5, 21.0) is None
    assert _saw(judge, 5, 22.0) == pytest.approx(10.0)


def test_a_node_that_was_frozen_itself_does_not_count_its_own_freeze() -> None:
    judge = HangJudge(10)
    judge.saw(3, True, 0.0)
    judge.restart(60.0)  # it woke after a minute stopped
    assert judge.still_for(60.0) is None
    judge.saw(3, True, 69.0)
    assert judge.still_for(69.0) is None
    judge.saw(3, True, 70.0)
    assert judge.still_for(70.0) == pytest.approx(10.0)


def test_a_failed_worker_gives_its_agent_another_timeout_before_the_stillness_is_a_hang() -> None:
    judge = HangJudge(10)
    judge.saw(3, True, 0.0)
    judge.saw(3, True, 8.0)
    judge.postpone(8.0)  # a worker failed at t=8: its peers wait for it until its agent ends the round
    assert _saw(judge, 3, 17.0) is None
    assert _saw(judge, 3, 18.0) == pytest.approx(10.0)  # a failed worker that never exits hangs after all


def test_looks_come_at_least_every_two_seconds_and_fifteen_times_a_timeout() -> None:
    assert look_interval(30) == 2.0
    assert look_interval(DEFAULT_HANG_TIMEOUT_S) == 2.0
    assert look_interval(3) == pytest.approx(0.2)


def test_attempts_hanging_at_the_same_point_are_stuck_after_three_and_not_before() -> None:
    stuck = StuckAttempts()
    for _ in range(STUCK_ATTEMPTS - 1):
        stuck.ended_at_a_point(HUNG, 40)
        assert not stuck.stuck()
    stuck.ended_at_a_point(HUNG, 44)  # within a quarter and two looks: the same point
    assert stuck.stuck()
    assert stuck.line().startswith("stopped restarting: 3 attempts in a row hung at the same point (")


def test_attempts_failing_or_hanging_at_the_same_point_are_stuck_and_the_line_names_the_last_error() -> None:
    stuck = StuckAttempts()
    stuck.ended_at_a_point(FAILED, 0, "rank 1: ValueError: bad batch")  # at once: before any rank reported
    stuck.ended_at_a_point(FAILED, 1, "rank 1: ValueError: bad batch")
    assert not stuck.stuck()
    stuck.ended_at_a_point(FAILED, 2, "rank 0: RuntimeError: Connection reset by peer")
    assert stuck.stuck()
    assert stuck.line() == ("stopped restarting: 3 attempts in a row failed at the same point (each kept moving for "
                            "about as long as the one before; the last: rank 0: RuntimeError: Connection reset by peer)")
    mixed = StuckAttempts()
    for how in (HUNG, FAILED, HUNG):
        mixed.ended_at_a_point(how, 30, "rank 1: exited with code 7" if how == FAILED else "")
    assert mixed.stuck() and "3 attempts in a row hung or failed at the same point" in mixed.line()


def test_an_attempt_that_got_further_or_ended_otherwise_starts_the_count_again() -> None:
    stuck = StuckAttempts()
    stuck.ended_at_a_point(HUNG, 40)
    stuck.ended_at_a_point(FAILED, 40)
    stuck.ended_at_a_point(HUNG, 120)  # it kept moving three times as long: further than the one before
    assert not stuck.stuck()
    stuck.ended_at_a_point(HUNG, 118)
    assert not stuck.stuck()
    stuck.ended_otherwise()  # a node joined, a peer was lost, its workers were stopped: not a point
    stuck.ended_at_a_point(HUNG, 118)
    stuck.ended_at_a_point(HUNG, 118)
    assert not stuck.stuck()
    stuck.ended_at_a_point(FAILED, 119)
    assert stuck.stuck()


def test_attempts_kept_for_the_next_launcher_read_back_the_same_and_anything_else_reads_as_none() -> None:
    stuck = StuckAttempts()
    stuck.ended_at_a_point(HUNG, 40)
    stuck.ended_at_a_point(FAILED, 41, "rank 1: exited with code 7")
    again = StuckAttempts.from_text(stuck.to_text())
    assert again == stuck
    again.ended_at_a_point(HUNG, 39)
    assert again.stuck()
    assert StuckAttempts.from_text('{"format": 1, "looks": [40, 41]}').ends == [(HUNG, 40), (HUNG, 41)]
    for text in ("", "{", "[]", '{"format": 3, "ends": [["hung", 1]]}', '{"format": 1, "looks": ["x"]}',
                 '{"format": 2, "ends": [["slow", 1]]}', '{"format": 2, "ends": [1]}'):
        assert StuckAttempts.from_text(text).ends == []


@pytest.mark.parametrize("given, seconds", [(None, DEFAULT_HANG_TIMEOUT_S), ("30", 30.0), ("off", 0.0), ("OFF", 0.0),
                                            ("1.5", 1.5), (45, 45.0)])
def test_a_hang_timeout_is_seconds_or_off(given: str | None, seconds: float) -> None:
    assert parse_hang_timeout(given) == seconds


@pytest.mark.parametrize("given", ["0", "-5", "abc", "nan", "inf", "", "0.5", "30s"])
def test_a_hang_timeout_that_is_not_positive_seconds_is_refused_naming_the_forms(given: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        parse_hang_timeout(given, "--hang_timeout")
    message = str(refused.value)
    assert repr(given) in message and "--hang_timeout" in message and "off" in message
    assert "\n" not in message

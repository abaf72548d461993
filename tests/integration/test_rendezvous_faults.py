"""The rendezvous under what the second review found (issue 54), tried as a launcher meets it: real
processes that a test freezes (SIGSTOP), kills or starts with a skewed wall clock, over a real
TCPStore, with each c10d handler the launcher runs where torch's handler keeps the same contract.
A node process (``jobs/rendezvous_node.py``) rendezvouses again whenever nodes wait, as torch's
agent does, and says so ("restart", "joined RANK WORLD_SIZE")."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousTimeoutError

from tests.integration.rendezvous_nodes import HANDLER_KINDS, background, make_handler, start_node, until

FAST = {"keep_alive_interval": 1, "keep_alive_max_attempt": 3}  # expiry: 3 s


class Node:
    """A node process and what it said, line by line, with when (this test's monotonic clock)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.strip()))

    def said(self, start: str) -> list[tuple[float, str]]:
        return [(at, line) for at, line in self.lines if line.startswith(start)]

    def joined(self, timeout_s: float, count: int = 1) -> tuple[int, int]:
        deadline = time.monotonic() + timeout_s
        while len(self.said("joined")) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.said("joined")) >= count, (self.lines, self.process.poll())
        _, rank, size = self.said("joined")[count - 1][1].split()
        return int(rank), int(size)


@pytest.fixture
def port() -> Iterator[int]:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield server.port


@pytest.fixture
def cluster(port: int) -> Iterator[Any]:
    """``cluster.handler(...)``: a handler in this process; ``cluster.process(...)``: a node process."""
    made: list[Any] = []
    processes: list[subprocess.Popen[str]] = []

    class Cluster:
        @staticmethod
        def handler(kind: str, min_nodes: int, max_nodes: int, **settings: Any) -> Any:
            made.append(make_handler(kind, port, min_nodes, max_nodes, **{**FAST, **settings}))
            return made[-1]

        @staticmethod
        def process(kind: str, min_nodes: int, max_nodes: int, env: dict[str, str] | None = None,
                    **settings: Any) -> Node:
            processes.append(start_node(kind, port, min_nodes, max_nodes, env=env, **{**FAST, **settings}))
            return Node(processes[-1])

    yield Cluster
    for process in processes:
        process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait()
    for handler in made:
        try:
            handler.shutdown()
        except Exception:
            pass


@pytest.mark.parametrize("kind", HANDLER_KINDS)
def test_a_node_frozen_while_rounds_passed_is_counted_as_waiting_soon_after_it_thaws(kind: str, cluster: Any) -> None:
    frozen = cluster.process(kind, 2, 3)
    time.sleep(1)  # it has arrived at round 0
    frozen.process.send_signal(signal.SIGSTOP)
    time.sleep(4)  # its keep-alive has expired
    members = [cluster.handler(kind, 2, 3, last_call_timeout=1) for _ in range(2)]
    for _ in range(3):  # rounds 0 to 2 form without it (its keep-alive expired)
        outcomes = [background(member.next_rendezvous) for member in members]
        until(lambda: all(outcomes), 30)
        assert [outcome[0].world_size for outcome in outcomes] == [2, 2], outcomes

    frozen.process.send_signal(signal.SIGCONT)

    # Counted within the keep-alive expiry and 2 s (before: never, until its join timed out).
    assert until(lambda: members[0].num_nodes_waiting() > 0, 3 + 2, every_s=0.2) <= 5
    if kind == "torch":
        return  # torch's handler counts it too, but then forms no round with it here (not ours to change)
    outcomes = [background(member.next_rendezvous) for member in members]
    assert frozen.joined(30)[1] == 3
    until(lambda: all(outcomes), 30)


@pytest.mark.parametrize("kind", HANDLER_KINDS)
def test_the_last_call_runs_from_the_min_th_live_arrival_not_counting_one_that_withdrew(kind: str,
                                                                                       cluster: Any) -> None:
    settings = {"last_call_timeout": 4}
    first = background(cluster.handler(kind, 2, 4, **settings).next_rendezvous)
    withdrawn = background(cluster.handler(kind, 2, 4, join_timeout=1, **settings).next_rendezvous)
    until(lambda: withdrawn, 10)
    assert isinstance(withdrawn[0], RendezvousTimeoutError)  # it came, then gave up
    second_at = time.monotonic()
    second = background(cluster.handler(kind, 2, 4, **settings).next_rendezvous)
    time.sleep(2.5)
    third = background(cluster.handler(kind, 2, 4, **settings).next_rendezvous)

    until(lambda: first and second and third, 20)
    assert [outcome[0].world_size for outcome in (first, second, third)] == [3, 3, 3]  # before: 2, and the third waited
    assert time.monotonic() - second_at >= 4


def test_a_spare_whose_clock_is_ten_minutes_ahead_restarts_nobody(cluster: Any) -> None:
    # Before: a spare only 4 s fast judged every member dead, opened the next round and arrived
    # there; the members restarted, again and again. Members 10 minutes behind and on time.
    members = [cluster.process("arrivals", 2, 2, env={"TORCHX_EXT_TEST_CLOCK_OFFSET": offset}, node_rank=rank)
               for rank, offset in enumerate(["-600", "0"])]
    assert sorted(member.joined(30)[0] for member in members) == [0, 1]
    spare = cluster.process("arrivals", 2, 2, env={"TORCHX_EXT_TEST_CLOCK_OFFSET": "600"}, node_rank=2)

    time.sleep(12)  # four times the keep-alive expiry

    assert [member.said("restart") for member in members] == [[], []]
    assert spare.said("joined") == []

    # And it still takes a lost member's place.
    members[1].process.kill()
    assert spare.joined(30) == (1, 2)
    assert members[0].joined(30, count=2) == (0, 2)


def test_survivors_keep_their_ranks_and_the_spare_takes_the_lost_ones(cluster: Any) -> None:
    kind = "arrivals"  # torch's handler forms no round after this loss here, before this change and after
    members = [cluster.process(kind, 3, 3, node_rank=rank) for rank in range(3)]
    assert [member.joined(30) for member in members] == [(0, 3), (1, 3), (2, 3)]
    spare = cluster.process(kind, 3, 3, node_rank=3)
    time.sleep(2)

    members[1].process.kill()  # the spare sees its keep-alive expire, and the others restart

    assert [members[0].joined(30, count=2), spare.joined(30), members[2].joined(30, count=2)] == [(0, 3), (1, 3), (2, 3)]


def test_a_member_slow_to_stop_its_workers_keeps_its_place_from_a_waiting_spare(cluster: Any) -> None:
    first, second = (cluster.handler("arrivals", 2, 2, node_rank=rank) for rank in range(2))
    outcomes = [background(first.next_rendezvous), background(second.next_rendezvous)]
    until(lambda: all(outcomes), 30)
    spare = cluster.process("arrivals", 2, 2, node_rank=2)
    time.sleep(2)

    # The first's worker failed: it rendezvouses again; the second takes 2.5 s to stop its workers
    # (before: over the 2 s turn grace, the spare took its place).
    again = background(first.next_rendezvous)
    time.sleep(2.5)
    second_again = background(second.next_rendezvous)

    until(lambda: again and second_again, 30)
    assert (again[0].rank, second_again[0].rank) == (0, 1)
    assert spare.said("joined") == [] and spare.process.poll() is None  # still a spare

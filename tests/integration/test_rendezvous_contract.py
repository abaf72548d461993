"""torch's rendezvous contract (after torch's own dynamic_rendezvous_test.py), held against both
c10d handlers the launcher runs: the arrival rendezvous (the default) and torch's (``--c10d-handler
torch``), each built as the launcher builds it, through torch's ``RendezvousHandler`` interface,
over a real TCPStore. Nodes are threads with store clients of their own, or processes a test kills."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousTimeoutError

from tests.integration.rendezvous_nodes import HANDLER_KINDS, background, make_handler, start_node, until
from torchx_ext.launcher.rendezvous.spare import SpareReleased



@pytest.fixture(params=HANDLER_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def port() -> Iterator[int]:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield server.port


@pytest.fixture
def nodes(port: int) -> Iterator[Callable[..., Any]]:
    """Makes handlers on ``port``; each is shut down after the test, as the launcher does."""
    made: list[Any] = []
    processes: list[subprocess.Popen[str]] = []

    def make(kind: str, min_nodes: int, max_nodes: int, **settings: Any) -> Any:
        handler = make_handler(kind, port, min_nodes, max_nodes, **settings)
        made.append(handler)
        return handler

    def process(kind: str, min_nodes: int, max_nodes: int, **settings: Any) -> subprocess.Popen[str]:
        started = start_node(kind, port, min_nodes, max_nodes, **settings)
        processes.append(started)
        return started

    make.process = process  # type: ignore[attr-defined]
    yield make
    for started in processes:
        started.kill()
        started.wait()
    for handler in made:
        try:
            handler.shutdown()
        except Exception:  # a handler whose store the test took away
            pass


def together(calls: list[Callable[[], Any]], timeout_s: float = 30) -> list[Any]:
    outcomes = [background(call) for call in calls]
    until(lambda: all(outcomes), timeout_s)
    return [outcome[0] if outcome else None for outcome in outcomes]


def test_every_node_gets_one_rank_even_where_host_name_and_pid_are_the_same(kind: str, nodes: Any) -> None:
    # Nodes in one process share this host's name and pid: two launchers in host-network containers
    # (pid 1) look alike too. The ranks are still 0..N-1, each once.
    handlers = [nodes(kind, 4, 4) for _ in range(4)]

    infos = together([handler.next_rendezvous for handler in handlers])

    assert sorted(info.rank for info in infos) == [0, 1, 2, 3] and {info.world_size for info in infos} == {4}


def test_a_member_that_rendezvouses_again_is_seen_waiting_by_the_others_within_2_s(kind: str, nodes: Any) -> None:
    first, second = nodes(kind, 2, 2), nodes(kind, 2, 2)
    together([first.next_rendezvous, second.next_rendezvous])

    again = background(first.next_rendezvous)  # its workers failed
    seen_after = until(lambda: second.num_nodes_waiting() >= 1, timeout_s=2.5, every_s=0.1)

    assert seen_after <= 2.0
    assert second.next_rendezvous().world_size == 2  # as torch's agent: it restarts its workers
    until(lambda: again, 10)
    assert again[0].world_size == 2


def test_a_node_whose_join_timed_out_is_not_in_the_next_round(kind: str, nodes: Any) -> None:
    with pytest.raises(RendezvousTimeoutError):
        nodes(kind, 2, 2, join_timeout=1).next_rendezvous()

    infos = together([nodes(kind, 2, 2).next_rendezvous for _ in range(2)], timeout_s=15)

    assert sorted(info.rank for info in infos) == [0, 1]  # the two that came, not the one that left


def test_a_node_killed_before_the_round_completed_is_not_in_it_once_its_keep_alive_expired(kind: str,
                                                                                             nodes: Any) -> None:
    killed = nodes.process(kind, 2, 2)
    time.sleep(1)  # it has arrived
    killed.kill()
    killed.wait()
    time.sleep(3.5)  # its keep-alive (1 s x 3) expired

    infos = together([nodes(kind, 2, 2).next_rendezvous for _ in range(2)], timeout_s=15)

    assert sorted(info.rank for info in infos) == [0, 1]


def test_a_killed_waiter_is_no_longer_counted_once_its_keep_alive_expired(kind: str, nodes: Any) -> None:
    members = [nodes(kind, 2, 3, last_call_timeout=1) for _ in range(2)]
    together([member.next_rendezvous for member in members])
    waiter = nodes.process(kind, 2, 3, last_call_timeout=1)  # the round has room: it is waited for
    until(lambda: members[0].num_nodes_waiting() >= 1, 10, every_s=0.2)

    waiter.kill()
    waiter.wait()

    until(lambda: members[0].num_nodes_waiting() == 0, 7, every_s=0.2)


@pytest.mark.parametrize("victim", ["first", "min-th"])
def test_a_round_completes_at_the_last_call_whichever_participant_died(kind: str, victim: str, nodes: Any) -> None:
    # min 2, max 4: the round completes at the last call (4 s after the 2nd node came) with the live
    # nodes. The first node is the first to try to complete it; the 2nd starts the last call.
    settings = {"last_call_timeout": 4}
    live = nodes(kind, 2, 4, **settings)
    outcomes = []
    if victim == "first":
        killed = nodes.process(kind, 2, 4, **settings)
        time.sleep(0.5)
        outcomes.append(background(live.next_rendezvous))
    else:
        outcomes.append(background(live.next_rendezvous))
        time.sleep(0.5)
        killed = nodes.process(kind, 2, 4, **settings)
    time.sleep(0.3)
    killed.kill()
    killed.wait()
    started = time.monotonic()
    outcomes.append(background(nodes(kind, 2, 4, **settings).next_rendezvous))

    until(lambda: all(outcomes), timeout_s=12)

    assert sorted(outcome[0].rank for outcome in outcomes) == [0, 1], outcomes
    assert {outcome[0].world_size for outcome in outcomes} == {2}
    assert time.monotonic() - started <= 8


def test_closing_ends_every_wait_at_once(kind: str, nodes: Any) -> None:
    waiting = nodes(kind, 2, 2)  # waits for a round that will not fill
    outcome = background(waiting.next_rendezvous)
    time.sleep(1)

    nodes(kind, 2, 2).set_closed()

    took = until(lambda: outcome, timeout_s=3)
    assert isinstance(outcome[0], RendezvousClosedError) and took <= 2.0, (outcome, took)


def test_closing_releases_a_waiting_spare_gracefully(kind: str, nodes: Any) -> None:
    member = nodes(kind, 1, 1)
    member.next_rendezvous()
    spare = nodes(kind, 1, 1)
    outcome = background(spare.next_rendezvous)
    time.sleep(1.5)
    assert not outcome  # the round is full: it waits, redundant

    member.set_closed()

    took = until(lambda: outcome, timeout_s=3)
    # torch's RendezvousGracefulExitError, which the launcher turns into its exit 0 for a spare
    assert isinstance(outcome[0], SpareReleased) and took <= 2.0, (outcome, took)


def test_old_rounds_keys_are_deleted_so_restarts_do_not_grow_the_store(kind: str, port: int, nodes: Any) -> None:
    server = dist.TCPStore("127.0.0.1", port, is_master=False)
    handlers = [nodes(kind, 2, 2) for _ in range(2)]
    counts = []
    for round_ in range(10):
        infos = together([handler.next_rendezvous for handler in handlers])
        for info in infos:  # what the agents and the watchdog write in a round's store
            info.store.set(f"agent.{info.rank}", "x")
            info.store.add(f"beat.{info.rank}", 1)
        counts.append(server.num_keys())

    assert counts[-1] <= counts[3] + 2, counts  # two rounds' keys at most, whatever the rounds


def test_a_keep_alive_whose_connection_was_cut_is_tried_again_so_a_spare_never_takes_a_live_members_place(
        port: int, nodes: Any, caplog: pytest.LogCaptureFixture) -> None:
    # The arrival rendezvous only: torch's handler sends its keep-alive on the node's one connection,
    # which never reconnects, so a cut there ends the node's rendezvous, not only its keep-alive.
    kind = "arrivals"
    # One member of a 1-node job, one spare: the watchdog is off (no peer), the keep-alive is all.
    before = client_ports(port)
    member = nodes(kind, 1, 1)
    made = client_ports(port)
    assert member.next_rendezvous().world_size == 1
    keep_alive = client_ports(port) - made - before
    assert len(keep_alive) == 1, keep_alive

    with caplog.at_level(logging.WARNING):
        cut(port, keep_alive.pop())  # as a NAT drops an idle connection
        time.sleep(4)  # over the expiry (1 s x 3)
        spare = nodes(kind, 1, 1)
        outcome = background(spare.next_rendezvous)
        time.sleep(5)

    assert not outcome and member.num_nodes_waiting() == 0  # the spare still waits
    assert any("keep-alive" in record.getMessage() for record in caplog.records)


def client_ports(port: int) -> set[str]:
    """The local ports of this host's connections to the store on ``port``."""
    listed = subprocess.run(["ss", "-tnH", "state", "established", f"( dport = :{port} )"], capture_output=True,
                            text=True, check=True).stdout
    return {line.split()[2].rsplit(":", 1)[1] for line in listed.splitlines() if line.strip()}


def cut(port: int, local_port: str) -> None:
    subprocess.run(["ss", "-K", "-tnH", f"( dport = :{port} and sport = :{local_port} )"], check=True,
                   capture_output=True)

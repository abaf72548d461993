"""The arrival rendezvous (torchx_ext/launcher/rendezvous/arrivals.py) through a real TCPStore: nodes
are threads, each with a store client of its own, as launchers have."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import (RendezvousClosedError, RendezvousGracefulExitError,
                                                  RendezvousTimeoutError)

from torchx_ext.launcher.rendezvous.arrival_handler import arrival_handler
from torchx_ext.launcher.rendezvous.arrivals import ArrivalRendezvous
from torchx_ext.launcher.rendezvous.core import NodeDescription, ranks_of


_nodes: list[ArrivalRendezvous] = []


@pytest.fixture
def port() -> Any:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield server.port
    for made in _nodes:  # as each launcher's shutdown does: no keep-alive outlives the test's store
        made.stop_beating()
    _nodes.clear()


def node(port: int, min_nodes: int, max_nodes: int, **options: Any) -> ArrivalRendezvous:
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    made = ArrivalRendezvous(client, "job", min_nodes, max_nodes, local_addr="127.0.0.1", **options)
    _nodes.append(made)
    return made


def in_threads(calls: list[Callable[[], Any]], timeout_s: float = 60) -> list[Any]:
    """Each call on a thread of its own, all at once; what each returned or raised."""
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as error:
            results[index] = error

    threads = [threading.Thread(target=run, args=(index,), daemon=True) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    return results


def in_background(call: Callable[[], Any], results: dict[Any, Any] | list[Any], key: Any = None) -> threading.Thread:
    """``call`` on a thread of its own, started; what it returns or raises goes into ``results``
    (appended to a list, or under ``key``). So a call still waiting when the test's store goes away
    raises nothing on its thread: the test has judged by what arrived in ``results`` by then."""

    def run() -> None:
        try:
            value = call()
        except Exception as error:
            value = error
        if isinstance(results, list):
            results.append(value)
        else:
            results[key] = value

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_sixty_four_nodes_form_one_round_with_every_rank_once(port: int) -> None:
    nodes = [node(port, 64, 64) for _ in range(64)]

    results = in_threads([member.join for member in nodes])

    assert {result[0] for result in results} == {0} and {result[2] for result in results} == {64}
    assert sorted(result[1] for result in results) == list(range(64))


def test_distinct_node_ranks_are_the_group_ranks_whatever_the_arrival_order(port: int) -> None:
    nodes = [node(port, 4, 4, node_rank=rank) for rank in (3, 1, 0, 2)]

    results = in_threads([member.join for member in nodes])

    assert [result[1] for result in results] == [3, 1, 0, 2]
    assert ranks_of([NodeDescription("b", 1, -1, "t0"), NodeDescription("a", 2, -1, "t1")]) == [1, 0]  # torch's order
    # Two launchers with the same host name and pid (host-network containers, pid 1) still differ.
    assert sorted(ranks_of([NodeDescription("h", 1, -1, "x"), NodeDescription("h", 1, -1, "y")])) == [0, 1]


def test_a_node_beyond_max_waits_and_takes_a_lost_members_place_in_the_next_round(port: int) -> None:
    first, second = node(port, 2, 2, node_rank=0), node(port, 2, 2, node_rank=1)
    spare = node(port, 2, 2, node_rank=2, join_timeout_s=1)  # a spare waits past its join timeout
    assert [result[1] for result in in_threads([first.join, second.join])] == [0, 1]
    spare_result: list[Any] = []
    spare_thread = in_background(spare.join, spare_result)
    time.sleep(1.5)
    assert spare_thread.is_alive() and spare.spare  # in the redundancy list (the launcher marks it "spare")
    assert first.num_nodes_waiting() == 0  # redundant: no new round asked for

    # The second node is lost: the first rendezvouses again (its watchdog told it), the spare joins.
    second.stop_beating()  # killed
    assert first.join() == (1, 0, 2)
    spare_thread.join(30)
    assert spare_result == [(1, 1, 2)]  # the lost node's place


def test_min_max_rounds_close_after_the_last_call_and_a_late_node_asks_for_the_next(port: int) -> None:
    early = [node(port, 2, 3, last_call_s=0.5) for _ in range(2)]
    started = time.monotonic()

    results = in_threads([member.join for member in early])

    assert {result[2] for result in results} == {2} and time.monotonic() - started >= 0.5
    late = node(port, 2, 3, last_call_s=0.5)
    late_result: list[Any] = []
    in_background(late.join, late_result)
    deadline = time.monotonic() + 10
    while early[0].num_nodes_waiting() == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert early[0].num_nodes_waiting() == 1  # the members rendezvous again, as torch's agent does
    again = in_threads([member.join for member in early])
    deadline = time.monotonic() + 10
    while not late_result and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {result[2] for result in again} == {3} and late_result and late_result[0][2] == 3


def test_closing_ends_a_redundant_wait_gracefully_and_refuses_new_nodes(port: int) -> None:
    members = [node(port, 1, 1) for _ in range(1)]
    in_threads([members[0].join])
    redundant = node(port, 1, 1)
    outcome: list[Any] = []

    def wait() -> None:
        try:
            outcome.append(redundant.join())
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    time.sleep(0.3)
    members[0].set_closed()
    thread.join(10)

    assert len(outcome) == 1 and isinstance(outcome[0], RendezvousGracefulExitError)
    with pytest.raises(RendezvousClosedError):
        node(port, 1, 1).join()


def test_a_round_that_cannot_fill_times_out_naming_who_came(port: int) -> None:
    lonely = node(port, 2, 2, join_timeout_s=1)
    started = time.monotonic()

    with pytest.raises(RendezvousTimeoutError, match=r"1 of 2\.\.2 nodes had arrived"):
        lonely.join()
    assert time.monotonic() - started < 5


def test_torchs_handler_interface_gives_workers_a_store_address_in_every_round(port: int,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    handlers = [arrival_handler(dist.TCPStore("127.0.0.1", port, is_master=False), "job", 2, 2, local_addr="127.0.0.1",
                                node_rank=rank) for rank in range(2)]

    for _ in range(2):  # a second round: both rendezvous again
        infos = in_threads([handler.next_rendezvous for handler in handlers])
        assert [info.rank for info in infos] == [0, 1]
        assert infos[0].bootstrap_store_info.master_port == infos[1].bootstrap_store_info.master_port
    handlers[0].shutdown()
    assert handlers[1].is_closed()
    handlers[1].shutdown()


def test_nodes_that_come_after_every_member_of_a_sealed_round_died_form_the_next_round(port: int) -> None:
    # A whole job started again against a store that outlived it (local_cwd's store host): the
    # round in the store is full, but none of its members beats any more.
    options = {"keep_alive_s": 0.3, "keep_alive_misses": 2}
    old = [node(port, 2, 2, **options) for _ in range(2)]
    assert sorted(result[1] for result in in_threads([member.join for member in old])) == [0, 1]
    for member in old:
        member.stop_beating()  # killed

    started = time.monotonic()
    results = in_threads([member.join for member in [node(port, 2, 2, **options) for _ in range(2)]], timeout_s=30)

    assert sorted(results) == [(1, 0, 2), (1, 1, 2)], results
    assert time.monotonic() - started < 10


def test_a_newcomer_waits_as_a_spare_until_a_member_stops_its_keep_alive_then_the_members_see_it(port: int) -> None:
    options = {"keep_alive_s": 0.3, "keep_alive_misses": 2}
    alive, lost = node(port, 2, 2, **options), node(port, 2, 2, **options)
    in_threads([alive.join, lost.join])
    newcomer = node(port, 2, 2, **options)
    result: list[Any] = []
    waiting = in_background(newcomer.join, result)
    time.sleep(1.5)  # over twice the members' silence allowed: both beat, the round is full
    assert waiting.is_alive() and newcomer.spare and alive.num_nodes_waiting() == 0

    lost.stop_beating()  # as torch's handler: off the redundancy list, onto the wait list
    deadline = time.monotonic() + 5
    while alive.num_nodes_waiting() == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive.num_nodes_waiting() == 1 and waiting.is_alive() and not newcomer.spare
    assert alive.join() == (1, 0, 2)  # the survivor rendezvouses again
    waiting.join(30)
    assert result == [(1, 1, 2)]  # the newcomer takes the lost member's place


def test_a_reopened_rounds_places_go_to_its_members_first_then_to_spares_in_the_order_they_came(port: int) -> None:
    first, second = node(port, 2, 2, node_rank=0), node(port, 2, 2, node_rank=1)
    in_threads([first.join, second.join])
    spares = [node(port, 2, 2, node_rank=rank) for rank in (2, 3)]
    results: dict[int, Any] = {}
    for index, spare in enumerate(spares):  # the first spare waits before the second comes
        in_background(spare.join, results, index)
        deadline = time.monotonic() + 10
        while not spare.spare and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spare.spare

    # Both members rendezvous again (their workers failed), the second a moment after the first
    # opened the round: the woken spares leave it their place.
    def late_second() -> tuple[int, int, int]:
        time.sleep(0.5)
        return second.join()

    assert in_threads([first.join, late_second], timeout_s=20) == [(1, 0, 2), (1, 1, 2)]
    assert not results

    # The second member is lost: the first rendezvouses again, the spare that came first takes
    # the place and the other waits on.
    second.stop_beating()  # killed
    assert first.join() == (2, 0, 2)
    deadline = time.monotonic() + 10
    while 0 not in results and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + 10
    while not spares[1].spare and time.monotonic() < deadline:  # once it has seen the round full
        time.sleep(0.05)
    assert results == {0: (2, 1, 2)} and spares[1].spare


def test_a_newcomer_to_a_reopened_round_comes_after_the_spare_that_waited(port: int) -> None:
    # A lost replica started again in place arrives while the round it left is open: the spare
    # that waited for that place takes it, and the newcomer waits as the next spare.
    first, second = node(port, 2, 2, node_rank=0), node(port, 2, 2, node_rank=1)
    in_threads([first.join, second.join])
    spare = node(port, 2, 2, node_rank=2)
    results: dict[str, Any] = {}
    in_background(spare.join, results, "spare")
    deadline = time.monotonic() + 10
    while not spare.spare and time.monotonic() < deadline:
        time.sleep(0.05)

    # The second node is lost; the first rendezvouses again and the replacement comes at once.
    second.stop_beating()  # killed
    replacement = node(port, 2, 2, node_rank=1)
    in_background(first.join, results, "first")
    observer = node(port, 2, 2).store  # a client of its own: the first's waits on its client
    while int(observer.add("round", 0)) < 1:
        time.sleep(0.01)
    in_background(replacement.join, results, "replacement")

    deadline = time.monotonic() + 15
    while not ("first" in results and "spare" in results and replacement.spare) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert results == {"first": (1, 0, 2), "spare": (1, 1, 2)} and replacement.spare, results


def test_a_node_that_ends_after_the_store_host_shuts_down_without_raising_as_torchs_does() -> None:
    # The store host's launcher ends as soon as its own workers are done; a peer's shutdown then
    # finds no store. torch's handler logs that and returns False: the job still succeeded.
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    handler = arrival_handler(dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=5)),
                              "job", 1, 1, local_addr="127.0.0.1")
    assert handler.next_rendezvous().rank == 0
    del server

    assert handler.shutdown() is False

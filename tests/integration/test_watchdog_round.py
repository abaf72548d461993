"""The watchdog of every node of one round, over a real TCPStore: threads of this process, each
node with a client of its own as a launcher has. A node stops beating as a frozen host does."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from torchx_ext.launcher.rendezvous.watchdog import KEY_PREFIX, Loss, RoundWatch

TIMEOUT_S = 10.0  # a beat every 2 s: an agent that read the loss at its next beat would be 0 to 4 s late
NODES = 6
FROZEN = 3  # watched by nodes 1 and 2 only


def _watches(on_loss: Any) -> tuple[Any, list[RoundWatch]]:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    watches = []
    for rank in range(NODES):
        client = dist.TCPStore("127.0.0.1", server.port, is_master=False)
        store = dist.PrefixStore("round1/", client)
        watches.append(RoundWatch(store, rank, NODES, TIMEOUT_S, on_loss(rank), f"127.0.0.1:{server.port}"))
    return server, watches


def _watchdog_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("torchx_ext watchdog")]


def _stop_all(watches: list[RoundWatch]) -> list[str]:
    """Stop every watch; the watchdog threads still alive 5 s later."""
    for watch in watches:
        watch.stop()
    deadline = time.monotonic() + 5
    while _watchdog_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    return _watchdog_threads()


def test_a_loss_that_two_neighbours_notice_reaches_every_node_at_once() -> None:
    noticed: dict[int, tuple[float, str]] = {}
    everyone = threading.Event()

    def on_loss(rank: int) -> Any:
        def record(loss: Loss) -> None:
            noticed.setdefault(rank, (time.monotonic(), loss.line))
            if len(noticed) == NODES - 1:
                everyone.set()
        return record

    server, watches = _watches(on_loss)
    try:
        for watch in watches:
            watch.start()
        time.sleep(3)
        watches[FROZEN].stop()
        stopped_at = time.monotonic()
        assert everyone.wait(TIMEOUT_S * 2), noticed
    finally:
        left = _stop_all(watches)
    times = [moment for moment, _ in noticed.values()]
    assert sorted(noticed) == [rank for rank in range(NODES) if rank != FROZEN]
    # Both neighbours may notice at once, each with its own count of the silence.
    assert all(line.startswith(f"lost node {FROZEN} (") for _, line in noticed.values()), noticed
    assert min(times) - stopped_at < TIMEOUT_S + 2 * TIMEOUT_S / 5
    # the nodes that do not watch node 3 knew when the first that did, not at their next beat
    assert max(times) - min(times) < 1.0, {rank: moment - min(times) for rank, (moment, _) in noticed.items()}
    assert left == []  # a round's watch ends with it: no wait left on the store
    del server


def test_a_loss_written_without_a_wake_still_reaches_every_node_within_a_timeout() -> None:
    # As when a listener's idle connection was dropped on the way (a NAT's idle timeout): the
    # loss is in the store, but no wait returns.
    noticed: dict[int, str] = {}
    server, watches = _watches(lambda rank: lambda loss: noticed.setdefault(rank, loss.line))
    try:
        for watch in watches:
            watch.start()
        time.sleep(1)
        as_an_agent = dist.PrefixStore(KEY_PREFIX, dist.PrefixStore("round1/", server))
        as_an_agent.set("lost", "lost node 9 (host elsewhere): silent for 10.0 s")
        written_at = time.monotonic()
        while len(noticed) < NODES and time.monotonic() - written_at < TIMEOUT_S * 2:
            time.sleep(0.1)
        waited = time.monotonic() - written_at
    finally:
        left = _stop_all(watches)
    assert set(noticed.values()) == {"lost node 9 (host elsewhere): silent for 10.0 s"}
    assert sorted(noticed) == list(range(NODES))
    assert waited < TIMEOUT_S + 2 * TIMEOUT_S / 5, waited
    assert left == []
    del server


def test_nodes_that_keep_beating_are_never_lost_and_their_watches_end_with_the_round() -> None:
    noticed: list[str] = []
    server, watches = _watches(lambda rank: lambda loss: noticed.append(loss.line))
    try:
        for watch in watches:
            watch.start()
        time.sleep(TIMEOUT_S * 1.5)
        assert noticed == []
    finally:
        left = _stop_all(watches)
    assert left == []
    assert noticed == []
    del server


def _noting(noticed: dict[int, str], rank: int) -> Any:
    def note(loss: Loss) -> None:
        noticed.setdefault(rank, loss.line)

    return note


def test_a_store_gone_for_a_moment_is_lost_by_nobody_and_every_node_says_so_once_and_beats_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each node's own connection breaks (the store's host restarted its server on the same port, as
    # a connection cut for a few seconds looks): that is the node's own trouble, not a peer's death.
    caplog.set_level(logging.WARNING, logger="torchx_ext.launcher")
    nodes = 3
    noticed: dict[int, str] = {}
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    port = server.port
    watches = []
    for rank in range(nodes):
        # A short client timeout: a connection refused meanwhile fails in 1 s, not the default 5 min.
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=1))
        watches.append(RoundWatch(dist.PrefixStore("round1/", client), rank, nodes, TIMEOUT_S, _noting(noticed, rank),
                                  f"127.0.0.1:{port}"))
    try:
        for watch in watches:
            watch.start()
        time.sleep(3)
        del server  # its listener and every connection to it close
        time.sleep(3)
        server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
        time.sleep(TIMEOUT_S + 2)  # longer than a silence that would have counted
        beats = dist.PrefixStore(KEY_PREFIX, dist.PrefixStore("round1/", server))
        counts = [int(beats.add(f"beat.{rank}", 0)) for rank in range(nodes)]
    finally:
        _stop_all(watches)
    assert noticed == {}
    assert all(count >= 3 for count in counts), counts  # every node beats in the store that came back
    said = [record.getMessage() for record in caplog.records if record.getMessage().startswith("peer watchdog:")]
    assert len([line for line in said if "failed, trying again" in line]) == nodes, said  # once each, not each beat
    assert len([line for line in said if "reaches the rendezvous store again" in line]) == nodes, said

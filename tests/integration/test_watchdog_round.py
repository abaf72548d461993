"""The watchdog of every node of one round, over a real TCPStore: threads of this process, each
node with a client of its own as a launcher has. A node stops beating as a frozen host does."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch.distributed as dist

from torchx_ext.launcher.watchdog import Loss, RoundWatch

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
    for watch in watches:
        watch.start()
    time.sleep(3)
    watches[FROZEN].stop()
    stopped_at = time.monotonic()
    assert everyone.wait(TIMEOUT_S * 2), noticed
    times = [moment for moment, _ in noticed.values()]
    assert sorted(noticed) == [rank for rank in range(NODES) if rank != FROZEN]
    assert {line for _, line in noticed.values()} == {next(iter(noticed.values()))[1]}
    assert f"lost node {FROZEN} (" in next(iter(noticed.values()))[1]
    assert min(times) - stopped_at < TIMEOUT_S + 2 * TIMEOUT_S / 5
    # the nodes that do not watch node 3 knew when the first that did, not at their next beat
    assert max(times) - min(times) < 1.0, {rank: moment - min(times) for rank, (moment, _) in noticed.items()}
    for watch in watches:
        watch.stop()
    deadline = time.monotonic() + 5
    while _watchdog_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _watchdog_threads() == []  # a round's watch ends with it: no wait left on the store
    del server


def test_nodes_that_keep_beating_are_never_lost_and_their_watches_end_with_the_round() -> None:
    noticed: list[str] = []
    server, watches = _watches(lambda rank: lambda loss: noticed.append(loss.line))
    for watch in watches:
        watch.start()
    time.sleep(TIMEOUT_S * 1.5)
    assert noticed == []
    for watch in watches:
        watch.stop()
    deadline = time.monotonic() + 5
    while _watchdog_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _watchdog_threads() == []
    assert noticed == []
    del server

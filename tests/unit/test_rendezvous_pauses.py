"""torch's rendezvous pauses under our handler (torchx_ext.launcher.rendezvous.pauses), on a real
TCPStore and torch's own c10d rendezvous handler."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

from torchx_ext.launcher.rendezvous.pauses import prompt_pauses


@pytest.fixture
def handler() -> Iterator[object]:
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    params = RendezvousParameters("c10d", f"127.0.0.1:{store.port}", "pauses", 2, 2, store=store)
    backend, rendezvous_store = create_backend(params)
    yield dynamic_rendezvous.DynamicRendezvousHandler.from_backend("pauses", rendezvous_store, backend, 2, 2)
    del store


def test_waiting_for_peers_ends_when_the_rendezvous_state_changes(handler: object) -> None:
    backend = handler._state_holder._backend  # type: ignore[attr-defined]  # torch's, private
    backend.set_state(b"before")
    changed = threading.Timer(0.2, lambda: backend.set_state(b"after", backend.get_state()[1]))
    changed.start()
    with prompt_pauses(handler):
        started = time.monotonic()
        dynamic_rendezvous._delay(1)  # what torch calls between two reads of the state
        waited = time.monotonic() - started
    changed.join()
    assert 0.15 < waited < 0.8


def test_with_no_change_the_wait_is_torchs_second_and_outside_the_handler_torch_pauses_as_ever(handler: object) -> None:
    with prompt_pauses(handler):
        started = time.monotonic()
        dynamic_rendezvous._delay(1)
        assert time.monotonic() - started >= 0.95
        started = time.monotonic()
        dynamic_rendezvous._delay((0.2, 0.3))  # the spread before a first join: none for 2 nodes
        assert time.monotonic() - started < 0.1
    started = time.monotonic()
    dynamic_rendezvous._delay((0.2, 0.3))
    assert time.monotonic() - started >= 0.2

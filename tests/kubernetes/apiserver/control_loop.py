"""What every stand-in controller of the test cluster runs on: a thread that syncs whenever the
store changes, and at least every 100 ms (as a real controller's informers and resyncs wake it)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from tests.kubernetes.apiserver import errors
from tests.kubernetes.apiserver.store import Store

log = logging.getLogger(__name__)


class ControlLoop:
    def __init__(self, store: Store, name: str, syncs: Sequence[Callable[[], None]]) -> None:
        """``syncs``: one pass of each, every time; one failing does not keep the others from theirs."""
        self._store = store
        self.name = name
        self._syncs = tuple(syncs)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            version = self._store.resource_version
            for sync in self._syncs:
                try:
                    sync()
                except errors.ApiError as error:  # a write that lost a race: the next pass sees why
                    log.debug("%s: %s", self.name, error.message)
                except Exception:  # keep the cluster alive; the test sees the symptom, the log says why
                    log.exception("%s: sync failed", self.name)
            self._store.wait_for_change(version, 0.1)

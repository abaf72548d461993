"""The arrival rendezvous' keep-alive: one thread per node, on a store connection of its own.

It writes this node's keep-alive key every ``keep_alive_s`` (a participant's or member's
``r{k}.node.{a}``, a waiter's ``r{k}.waiter.{t}``: a beat counter that moves on at every write,
and what the node says of itself; observers judge it by whether it moves, on their own clocks:
no wall-clock time is written; each write a compare-and-set of what it wrote last, so a key
deleted with its round while this node was frozen is not written anew), and wakes this node's wait for a seal at each
beat and at its deadlines (the node waits in the store, which has no wait with a deadline that does
not log a warning when it ends). A store call that fails is logged and tried again at
the next beat: a keep-alive that stopped for good would let waiting nodes count a live member as
gone. ``stop`` ends the thread before its caller goes on, so no thread of it outlives a
``shutdown`` and returns from a store call while the interpreter finalizes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)
STOP_WAIT_S = 5.0
"""How long ``stop`` waits for a store call in flight (a store that stopped answering)."""


class KeepAlive:
    def __init__(self, store: Any, interval_s: float) -> None:
        self._store = store  # cloned on the thread: connecting may hang
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # held while a beat is on its way to the store
        self._changed = threading.Event()
        self._stopped = threading.Event()
        self._key: str | None = None
        self._value: Callable[[int], str] = str
        self._count = 0  # the beat counter: never the same value twice on one key
        self._expected: str | None = None
        """What the key holds, as this node last wrote it: a beat replaces only that (None: any)."""
        self._gone = False
        """The key no longer holds it: deleted with its round while this node was frozen."""
        self._wake_key: str | None = None
        self._wake_at: float | None = None
        self._failing = False
        self._next_beat: float | None = None  # set by ``beat``: when the new key's first beat is due
        self._thread = threading.Thread(target=self._run, name="torchx_ext rendezvous: keep-alive", daemon=True)
        self._thread.start()

    def beat(self, key: str | None, value: Callable[[int], str] | None = None, wake_key: str | None = None,
             written: bool = False) -> None:
        """Keep ``key`` alive from now on with ``value(count)`` (None: no key, as a node that left
        its round; the caller writes count 0 itself), and wake
        ``wake_key``'s waiter at each beat; the first beat now, or one interval on when the caller
        has ``written`` the key itself. Once this returns, no write of the key before lands."""
        with self._writing, self._lock:
            same = key == self._key
            self._key, self._wake_key, self._wake_at = key, wake_key, None
            if value is not None:
                self._value = value
            if written:
                self._expected, self._gone = self._value(0), False
            elif not same:
                self._expected, self._gone = None, False
            self._next_beat = time.monotonic() + (self._interval_s if written else 0.0)
        self._changed.set()

    def wake_at(self, monotonic: float | None) -> None:
        """Also wake the waiter at ``monotonic`` (a deadline of its own)."""
        with self._lock:
            self._wake_at = monotonic
        self._changed.set()

    def stop(self) -> None:
        self._stopped.set()
        self._changed.set()
        if self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S)

    def _write(self, store: Any, key: str, expected: str | None, new: str) -> None:
        """Replace what this node wrote in ``key`` by ``new``: a compare-and-set, so a key deleted
        with its round (this node frozen meanwhile) is not written anew."""
        if expected is None:
            store.set(key, new)
            written = True
        else:
            written = bytes(store.compare_set(key, expected, new)) == new.encode()
        with self._lock:
            if self._key == key:
                self._expected = new if written else self._expected
                self._gone = not written

    def _run(self) -> None:
        store: Any = None
        next_beat = time.monotonic()
        while not self._stopped.is_set():
            with self._lock:
                now = time.monotonic()
                if self._next_beat is not None:
                    next_beat, self._next_beat = self._next_beat, None
                key, wake_key, wake_at, value = self._key, self._wake_key, self._wake_at, self._value
                beat = now >= next_beat
                wake = wake_key is not None and (beat or (wake_at is not None and now >= wake_at))
                if wake and wake_at is not None and now >= wake_at:
                    self._wake_at = None
            try:
                if store is None:
                    store = self._store.clone()
                with self._writing:
                    with self._lock:
                        current = self._key == key
                        expected = self._expected
                    if beat and key is not None and current:
                        self._count += 1
                        self._write(store, key, expected, value(self._count))
                    if wake and current and not self._gone:  # a deleted round's wake key stays deleted
                        store.set(wake_key, "")
                if self._failing:
                    logger.warning("rendezvous keep-alive: the store answers again")
                    self._failing = False
            except Exception as error:  # logged once a streak, tried again at the next beat
                store = None  # a TCPStore client never reconnects: the next beat opens a new connection
                if not self._failing:
                    logger.warning("rendezvous keep-alive: a store call failed, trying again every %g s: %s",
                                   self._interval_s, str(error).splitlines()[0] if str(error) else type(error).__name__)
                self._failing = True
            if beat:
                next_beat = time.monotonic() + self._interval_s
            with self._lock:
                until = min(next_beat, self._wake_at) if self._wake_at is not None else next_beat
            self._changed.wait(max(0.0, until - time.monotonic()))
            self._changed.clear()

"""A view of a c10d store under a key prefix, in Python: what torch's ``PrefixStore`` does for the
calls the arrival rendezvous makes, but calling the store's own Python methods, so that it works
over a store written in Python too (a benchmark's counting store: torch's C++ ``PrefixStore``
cannot reach a Python store's ``delete_key``). Keys are ``PREFIX/KEY``, as ``PrefixStore``'s."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any


def delete_keys(client: Any, doomed: Callable[[str], bool]) -> None:
    """Delete every key of the whole store behind ``client`` (a TCPStore: it lists its keys) for
    which ``doomed`` holds: an old round's, which nobody reads any more."""
    for key in client.list_keys():
        if doomed(key):
            client.delete_key(key)


class PrefixedKeys:
    def __init__(self, prefix: str, store: Any) -> None:
        self.prefix = prefix
        self.store = store

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}"

    def set(self, key: str, value: str) -> None:
        self.store.set(self._key(key), value)

    def get(self, key: str) -> bytes:
        return bytes(self.store.get(self._key(key)))

    def add(self, key: str, amount: int) -> int:
        return int(self.store.add(self._key(key), amount))

    def check(self, keys: list[str]) -> bool:
        return bool(self.store.check([self._key(key) for key in keys]))

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        return bytes(self.store.compare_set(self._key(key), expected, desired))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [bytes(value) for value in self.store.multi_get([self._key(key) for key in keys])]

    def multi_set(self, keys: list[str], values: list[str]) -> None:
        self.store.multi_set([self._key(key) for key in keys], values)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        self.store.wait([self._key(key) for key in keys], timeout)

    def delete_key(self, key: str) -> bool:
        return bool(self.store.delete_key(self._key(key)))

    def clone(self) -> "PrefixedKeys":
        """The same view over a connection of its own."""
        return PrefixedKeys(self.prefix, self.store.clone())

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


ABSENT = "\x00torchx_ext: no such key"
"""A value no key is ever given: ``peek`` compares with it."""


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

    def peek(self, key: str) -> bytes | None:
        """The value of ``key``, or None, at once: a store's ``get`` waits for a key that is not
        there (one deleted since a ``check``: until the store's timeout), and ``add(key, 0)``
        would write it. A compare-and-set whose expected value no key holds only reads."""
        value = bytes(self.store.compare_set(self._key(key), ABSENT, ABSENT))
        return None if value == ABSENT.encode() else value

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

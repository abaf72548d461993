"""The warm interpreter (local_cwd's ``-cfg warm=true``) in tests: one per test session, in a
runtime directory of the session's own, started once and stopped at the end."""

from __future__ import annotations

import time

from torchx_ext.warm import client


def ensure_warm(timeout_s: float = 60) -> int:
    """The pid of this environment's warm interpreter, started if none answers."""
    found = client.status()
    if found is None:
        client.start_server()
    deadline = time.monotonic() + timeout_s
    while found is None:
        assert time.monotonic() < deadline, "no warm interpreter answered"
        time.sleep(0.1)
        found = client.status()
    return int(found["pid"])

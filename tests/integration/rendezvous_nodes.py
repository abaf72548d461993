"""Rendezvous handlers built as the launcher builds them (``watch_rendezvous``, then torch's
registry of handlers, over a store client to ``127.0.0.1:PORT``), with either c10d handler; and
nodes in processes of their own, which a test can kill."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HANDLER_KINDS = ("arrivals", "torch")
FAST = {"join_timeout": 60, "last_call_timeout": 2, "keep_alive_interval": 1, "keep_alive_max_attempt": 3}
"""Settings that make a contract test take seconds: a keep-alive 3 s old is expired. (torch's handler
drops its own live members at 1 s x 2: it reads its state through a cache of 1 s.)"""
NODE_SCRIPT = Path(__file__).parent / "jobs" / "rendezvous_node.py"


def make_handler(kind: str, port: int, min_nodes: int, max_nodes: int, node_rank: int = -1, **settings: Any) -> Any:
    """The launcher's c10d handler (``kind``: ``--c10d-handler``), with no watchdog."""
    from torchx_ext.launcher.rendezvous.config import c10d_handler

    return c10d_handler(min_nodes, max_nodes, f"127.0.0.1:{port}", "contract", {**FAST, "is_host": False, **settings},
                        handler=kind, node_rank=node_rank, local_addr="127.0.0.1")


def start_node(kind: str, port: int, min_nodes: int, max_nodes: int, env: dict[str, str] | None = None,
               **settings: Any) -> subprocess.Popen[str]:
    """A node in a process of its own (``jobs/rendezvous_node.py``), once it is about to call
    ``next_rendezvous`` (it said "ready"); ``env`` added to this process's."""
    process = subprocess.Popen([sys.executable, str(NODE_SCRIPT), kind, str(port), str(min_nodes), str(max_nodes),
                                json.dumps(settings)], stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.strip() == "ready", line
    return process


def background(call: Callable[[], Any]) -> list[Any]:
    """``call`` on a thread of its own; what it returns or raises lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:
            outcome.append(error)

    threading.Thread(target=run, daemon=True).start()
    return outcome


def until(condition: Callable[[], Any], timeout_s: float, every_s: float = 0.05) -> float:
    """Seconds until ``condition`` held (it is asserted after ``timeout_s``)."""
    started = time.monotonic()
    while not condition() and time.monotonic() - started < timeout_s:
        time.sleep(every_s)
    assert condition()
    return time.monotonic() - started

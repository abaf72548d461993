"""A lost rendezvous store: the line a launcher says, and its exit (a TCPStore client never
reconnects, and the agent's own calls to it hang)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

from torchx_ext.errors import first_line
from torchx_ext.launcher.rendezvous.watchdog import Loss

REPORT_BOUND_S = 2.0


_CLOSED_MARKS = ("Connection was likely closed", "Broken pipe", "Connection reset by peer")


def closed_store_line(error: BaseException, endpoint: str) -> str | None:
    """The line a launcher says when a store call failed because the store's end of the
    connection closed (its host exited or was killed), before the watchdog's silence judged it
    lost: the same words (schedulers read them as the consequence of the host's loss). None for
    other errors (a timeout, a store never reached)."""
    import torch.distributed as dist

    seen: BaseException | None = error
    while seen is not None:
        text = str(seen)
        if isinstance(seen, dist.DistNetworkError) and any(mark in text for mark in _CLOSED_MARKS):
            return f"lost the rendezvous store at {endpoint}: its connection closed ({first_line(seen)})"
        seen = seen.__cause__ or seen.__context__
    return None


def exit_for_store_loss(loss: Loss, exit_code: int, write_report: Callable[[str], None]) -> None:
    """The launcher's answer to a lost store: report, then leave at once (the agent's own store
    calls hang, so nothing else would end this process). Workers die with the launcher. The report
    gets 2 s (a cut node's shared file system, a full pipe may block it): leaving is not delayed."""

    def report() -> None:
        write_report(loss.line)
        print(f"[torchx_ext.launcher] error: {loss.line}; stopping", file=sys.stderr, flush=True)

    try:
        reporter = threading.Thread(target=report, name="torchx_ext: last report", daemon=True)
        reporter.start()
        reporter.join(REPORT_BOUND_S)
    finally:
        os._exit(exit_code)

"""How a launcher's stacks reach its replica's log and ``torchx stacks``: a contract of the launcher,
every scheduler and the CLI, apart from all three.

A launcher writes every local rank's stack into its log between a line starting ``STACKS_BEGIN``
(followed by why) and ``STACKS_END``. ``torchx stacks`` asks for a block by sending
``REQUEST_SIGNAL`` (SIGURG) to the replicas' launchers, each scheduler by its own means; SIGURG's
default action is to ignore it, so any other process that gets it (a worker, a step program, a role
of the user's own, an image's older launcher) is left as it was. Its block says ``ASKED``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable

REQUEST_SIGNAL = signal.SIGURG
STACKS_BEGIN = "[torchx_ext.launcher] stacks:"
STACKS_END = "[torchx_ext.launcher] stacks end"
ASKED = "asked for by torchx stacks"


def blocks(lines: Iterable[str], asked_only: bool = False) -> list[list[str]]:
    """The stacks blocks in a log's ``lines`` (each from its first line to its end line), in order."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith(STACKS_BEGIN):
            current = [line]
        elif current is not None:
            current.append(line)
            if line == STACKS_END:
                if not asked_only or current[0] == f"{STACKS_BEGIN} {ASKED}":
                    found.append(current)
                current = None
    return found

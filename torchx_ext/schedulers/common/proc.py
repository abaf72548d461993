"""Processes through /proc: one told apart from a later one of the same pid, and a whole tree
killed. Standard library only: local's supervisor, slurm's step and the warm interpreter's
guardians import it on every start."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), which tells it apart from a later process
    with the same pid; None once it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # exited, not yet reaped
    return int(fields[19])


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything below it, frozen or not (workers in sessions of their own
    included: they are still its descendants)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parent = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    pending = [pid]
    while pending:
        current = pending.pop()
        pending += children.get(current, [])
        try:
            os.kill(current, signal.SIGKILL)
        except ProcessLookupError:
            pass

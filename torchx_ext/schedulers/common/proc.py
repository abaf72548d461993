"""A process told apart from a later one of the same pid, through /proc. Standard library only:
local's supervisor and slurm's step import it on every start."""

from __future__ import annotations

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

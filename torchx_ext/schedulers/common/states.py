"""Job and replica states, the moves allowed between them, and their torchx ``AppState``.

Every backend reports in these terms: local_cwd's supervisor records them, Docker and
Kubernetes derive them from containers and pods. A replica goes
PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED (RUNNING -> RUNNING is a restart;
PENDING -> FAILED a replica that could not start, PENDING -> CANCELLED one never started);
a job goes SUBMITTED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, or straight from
SUBMITTED to CANCELLED (cancelled before it started) or FAILED (its runner died first).
Terminal states are final. A ``JobEnd`` is an end a scheduler decided that exit codes cannot
tell (a cancel; a failure for which the other replicas were stopped); each backend keeps it
where its jobs live (``docker.view``: a volume's labels; ``kubernetes.view``: an
annotation).

Standard library only; torchx's AppState is imported when asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import signal
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from torchx_ext.errors import StateTransitionError


class State(str, Enum):
    SUBMITTED = "SUBMITTED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})


@dataclass(frozen=True)
class JobEnd:
    """An end of a job decided by us, not read from its replicas' exit codes."""

    state: State
    """CANCELLED or FAILED."""
    at: float
    message: str
    replica: str = ""
    """The replica (``role/id``) whose failure ended the job; empty for a cancel."""
_ENDS = frozenset(TERMINAL)
REPLICA_MOVES: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.RUNNING, State.FAILED, State.CANCELLED}),
    State.RUNNING: frozenset({State.RUNNING, *_ENDS}),
}
JOB_MOVES: dict[State, frozenset[State]] = {
    State.SUBMITTED: frozenset({State.RUNNING, *_ENDS}),
    State.RUNNING: _ENDS,
}


def replica_move(current: State, new: State) -> State:
    """``new``, when a replica may go there from ``current``; else StateTransitionError."""
    return _move("replica", REPLICA_MOVES, current, new)


def job_move(current: State, new: State) -> State:
    """``new``, when a job may go there from ``current``; else StateTransitionError."""
    return _move("job", JOB_MOVES, current, new)


def _move(what: str, moves: dict[State, frozenset[State]], current: State, new: State) -> State:
    if new not in moves.get(current, frozenset()):
        allowed = ", ".join(sorted(state.value for state in moves.get(current, frozenset()))) or "nothing (it is final)"
        raise StateTransitionError(f"a {what} in state {current} cannot become {new}: from {current} it may become {allowed}")
    return new


def job_state_from_replicas(replicas: Iterable[State], cancelled: bool = False) -> State | None:
    """The state of a job seen only through its replicas (containers, pods); None when no
    replica was found, i.e. the app does not exist. A job cancelled on request is CANCELLED
    once nothing of it runs, whatever its replicas exited with."""
    states = list(replicas)
    if not states:
        return None
    if all(state.terminal for state in states):
        if cancelled or State.CANCELLED in states and State.FAILED not in states:
            return State.CANCELLED
        return State.SUCCEEDED if all(state is State.SUCCEEDED for state in states) else State.FAILED
    if State.RUNNING in states or any(state.terminal for state in states):
        return State.RUNNING
    return State.PENDING if State.PENDING in states else State.SUBMITTED


def app_state(state: State | None) -> Any:
    """torchx's ``AppState`` for ``state`` (None: UNKNOWN, a replica not reported yet)."""
    from torchx.specs import AppState

    return AppState.UNKNOWN if state is None else AppState[state.value]


def restarts_message(restarts: int, last_failure: str) -> str:
    """What a job that has not failed says of its restarts: how many, and what made the last."""
    if restarts <= 0:
        return ""
    count = f"{restarts} restart{'' if restarts == 1 else 's'}"
    return f"{count}, the last after {last_failure}" if last_failure else count


def spares_message(spares: Sequence[tuple[str, int]]) -> str:
    """What a job says of its replicas waiting as hot spares (``launcher/spare.py``), by torchx's
    ``role[id]`` names."""
    if not spares:
        return ""
    names = ", ".join(f"{role}[{replica_id}]" for role, replica_id in spares)
    return f"{len(spares)} hot spare{'' if len(spares) == 1 else 's'} waiting: {names}"


def joined_message(*parts: str) -> str:
    """The parts of a job's message that say something, in one line."""
    return "; ".join(part for part in parts if part)


def how_it_ended(code: int) -> str:
    """A process's exit as a replica's message says it (negative: the signal that killed it)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"was killed by signal {-code}"

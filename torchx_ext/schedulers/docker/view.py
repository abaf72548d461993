"""A local_docker job's state, read purely from what the engine reports about its containers.

The engine keeps everything: each container's status, exit code, times and restart count
(its own ``on-failure`` policy restarts a replica ``max_retries`` times), and one "end" volume
per job whose labels record a decision that exit codes cannot: the job was cancelled, or it
failed because of one replica and the others were stopped for that. Whoever decides first
creates the end volume; the engine keeps only the first (see ``client.py``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torchx_ext.liveness import SPARE_WORD
from torchx_ext.schedulers.common.states import JobEnd, State
from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.docker.request import (
    LABEL_MAX_RETRIES, LABEL_MIN_REPLICAS, LABEL_POLICY, LABEL_WHOLE_APP, LABEL_REPLICA, LABEL_ROLE, LABEL_ROLE_REPLICAS,
)

LABEL_END_STATE = "torchx_ext.end_state"
LABEL_END_AT = "torchx_ext.end_at"
LABEL_END_REPLICA = "torchx_ext.end_replica"
LABEL_END_MESSAGE = "torchx_ext.end_message"
# Containers the end stops finish a moment after it is recorded; the engine's clock and ours
# are one clock on a local engine, so a small margin only absorbs rounding.
_STOPPED_AFTER_END_MARGIN_S = 1.0
_RUNNING = frozenset({"running", "restarting", "paused", "removing"})


@dataclass(frozen=True)
class ContainerView:
    name: str
    role: str
    replica_id: int
    status: str
    """The engine's: created, running, restarting, paused, exited, dead, removing."""
    exit_code: int | None
    started_at: float | None
    finished_at: float | None
    restarts: int
    """Every restart: the engine's count since the last start we made, plus ours (snapshot.py)."""
    max_retries: int
    oom_killed: bool = False
    engine_error: str = ""
    role_replicas: int = 1
    min_replicas: int = 1
    """An elastic role carries on while this many of its replicas have not failed for good."""
    health: str = ""
    """The HEALTHCHECK's verdict (starting, healthy, unhealthy), for a replica that has one. The
    engine calls a paused container unhealthy at once."""
    spare: bool = False
    """Its last probe found the launcher waiting as a hot spare (``launcher/spare.py``)."""
    whole_app: bool = False
    """Retried with the whole app (APPLICATION): ``restarts`` are the app's."""
    elastic: bool = False
    """Its role is elastic (``-j MIN:MAX``; not hot spares, whose role also runs more than its minimum)."""

    @property
    def key(self) -> str:
        return f"{self.role}/{self.replica_id}"

    @staticmethod
    def from_inspect(attrs: Mapping[str, Any]) -> "ContainerView":
        """From the engine's inspect JSON of one of our containers."""
        state = attrs.get("State") or {}
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        finished = engine_time(state.get("FinishedAt"))
        status = str(state.get("Status", "unknown"))
        policy = _policy(labels)
        return ContainerView(
            name=str(attrs.get("Name", "")).lstrip("/"),
            role=labels.get(LABEL_ROLE, ""),
            replica_id=int(labels.get(LABEL_REPLICA, "0")),
            status=status,
            exit_code=int(state["ExitCode"]) if status in ("exited", "dead") or finished else None,
            started_at=engine_time(state.get("StartedAt")),
            finished_at=finished,
            restarts=int(attrs.get("RestartCount") or 0),
            max_retries=policy.max_retries,
            oom_killed=bool(state.get("OOMKilled")),
            engine_error=str(state.get("Error") or ""),
            role_replicas=policy.num_replicas,
            min_replicas=policy.min_replicas,
            health=str((state.get("Health") or {}).get("Status") or ""),
            spare=_last_probe_says_spare(state.get("Health") or {}),
            whole_app=labels.get(LABEL_WHOLE_APP) == "1",
            elastic=policy.is_elastic,
        )


def _policy(labels: Mapping[str, str]) -> RolePolicy:
    """The container's role policy: its label, or the labels a container created before it carries."""
    whole = RolePolicy.from_text(labels.get(LABEL_POLICY, ""))
    if whole is not None:
        return whole
    replicas = int(labels.get(LABEL_ROLE_REPLICAS, "1"))
    return RolePolicy(max_retries=int(labels.get(LABEL_MAX_RETRIES, "0")), num_replicas=replicas,
                      min_replicas=int(labels.get(LABEL_MIN_REPLICAS) or replicas))


def _last_probe_says_spare(health: Mapping[str, Any]) -> bool:
    """The engine keeps the last probes' output (``State.Health.Log``): the probe prints
    ``SPARE_WORD`` for a launcher waiting as a hot spare."""
    probes = health.get("Log") or []
    last = probes[-1] if probes and isinstance(probes[-1], Mapping) else {}
    return last.get("ExitCode") == 0 and str(last.get("Output") or "").strip() == SPARE_WORD


def end_labels(end: JobEnd) -> dict[str, str]:
    """``end`` as the labels of the job's end volume."""
    return {
        LABEL_END_STATE: end.state.value,
        LABEL_END_AT: f"{end.at:.6f}",
        LABEL_END_REPLICA: end.replica,
        LABEL_END_MESSAGE: end.message,
    }


def end_from_labels(labels: Mapping[str, str]) -> JobEnd | None:
    try:
        return JobEnd(State(labels[LABEL_END_STATE]), float(labels[LABEL_END_AT]),
                      message=labels.get(LABEL_END_MESSAGE, ""), replica=labels.get(LABEL_END_REPLICA, ""))
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class DockerJobView:
    state: State | None
    """None: no container of this app exists."""
    replicas: dict[tuple[str, int], State]
    failing: ContainerView | None
    """The replica whose failure ends (or ended) the job."""
    unended: bool
    """A replica failed for good but nobody has recorded the end yet: whoever sees this ends it."""


def replica_state(container: ContainerView, end: JobEnd | None) -> State:
    if container.status in _RUNNING:
        return State.RUNNING
    if container.status == "created" and not container.engine_error:
        return State.CANCELLED if end is not None else State.PENDING
    if container.exit_code == 0:
        return State.SUCCEEDED
    if end is not None and container.key != end.replica and _ended_by(container, end):
        return State.CANCELLED  # stopped because the job was ending
    if end is None and container.status == "exited" and container.restarts < container.max_retries:
        return State.RUNNING  # the engine's on-failure policy starts it again
    return State.FAILED


def read_job(containers: Iterable[ContainerView], end: JobEnd | None) -> DockerJobView:
    found = list(containers)
    if not found:
        return DockerJobView(None, {}, None, False)
    replicas = {(container.role, container.replica_id): replica_state(container, end) for container in found}
    lost = _lost(found, replicas)
    failed = [container for container in found
              if replicas[(container.role, container.replica_id)] is State.FAILED and container.key not in lost]
    if end is not None:
        failing = next((container for container in found if container.key == end.replica), None)
        return DockerJobView(end.state, replicas, failing, False)
    if failed:
        first = min(failed, key=lambda container: (container.finished_at or 0.0, container.key))
        return DockerJobView(State.FAILED, replicas, first, True)
    states = {state for (role, replica_id), state in replicas.items() if f"{role}/{replica_id}" not in lost}
    if states == {State.SUCCEEDED}:
        return DockerJobView(State.SUCCEEDED, replicas, None, False)
    if states == {State.PENDING}:
        return DockerJobView(State.PENDING, replicas, None, False)
    return DockerJobView(State.RUNNING, replicas, None, False)


def _lost(containers: list[ContainerView], replicas: Mapping[tuple[str, int], State]) -> set[str]:
    """Replicas failed for good in an elastic role that still has ``min_replicas`` others."""
    lost = set()
    for role in {container.role for container in containers}:
        members = [container for container in containers if container.role == role]
        failed = [container for container in members if replicas[(role, container.replica_id)] is State.FAILED]
        needed = min(members[0].min_replicas, members[0].role_replicas)
        if failed and needed < members[0].role_replicas and len(members) - len(failed) >= needed:
            lost |= {container.key for container in failed}
    return lost


def failure_message(container: ContainerView, root_cause: str) -> str:
    code = container.exit_code
    how = "could not start" if container.engine_error and not container.started_at else f"exited with code {code}"
    if container.oom_killed:
        how += " (killed for using more memory than its limit)"
    return f"replica {container.key} ({container.name}) {how}: {root_cause}"


def _ended_by(container: ContainerView, end: JobEnd) -> bool:
    if container.finished_at is None:
        return True
    return container.finished_at >= end.at - _STOPPED_AFTER_END_MARGIN_S


def engine_time(text: object) -> float | None:
    """The engine's RFC 3339 times with nanoseconds; its zero time means never."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    main, _, rest = text.partition(".")
    fraction, zone = "", "Z"
    if rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction, zone = rest[:digits], rest[digits:] or "Z"
    elif main.endswith("Z"):
        main, zone = main[:-1], "Z"
    elif len(main) > 19:
        main, zone = main[:19], main[19:]
    moment = datetime.datetime.fromisoformat(main + ("+00:00" if zone == "Z" else zone))
    return moment.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)

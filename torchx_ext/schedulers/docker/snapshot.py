"""A job as the engine has it now, and ending a job one of whose replicas failed for good.

Used by the scheduler (describe, cancel, list) and by the watcher process, so a job whose
watcher is gone is still ended by the first process that looks at it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from torchx_ext.error_file import parse_error_report
from torchx_ext.liveness import DEFAULT_MAX_AGE_S
from torchx_ext.schedulers.common.states import JobEnd, State
from torchx_ext.schedulers.docker.client import Engine
from torchx_ext.schedulers.docker.view import ContainerView, DockerJobView, failure_message, read_job
from torchx_ext.schedulers.docker.request import ERROR_FILE, LABEL_GRACE

DEFAULT_GRACE_S = 10


@dataclass(frozen=True)
class Snapshot:
    app_id: str
    containers: tuple[tuple[ContainerView, Any], ...]
    end: JobEnd | None
    view: DockerJobView
    last_restart_cause: str = ""
    """What made the last start we made of a replica (the engine's own restarts keep none)."""
    app_restarts: int = 0
    """Restarts of the whole app (retry_policy APPLICATION): counted once, not per replica."""

    def find(self, role: str, replica_id: int) -> tuple[ContainerView, Any] | None:
        return next(((view, container) for view, container in self.containers
                     if (view.role, view.replica_id) == (role, replica_id)), None)

    @property
    def running(self) -> list[Any]:
        return [container for view, container in self.containers if view.status in ("running", "restarting", "paused")]

    @property
    def grace_s(self) -> int:
        for _, container in self.containers:
            labels = container.attrs.get("Config", {}).get("Labels") or {}
            if labels.get(LABEL_GRACE, "").isdigit():
                return int(labels[LABEL_GRACE])
        return DEFAULT_GRACE_S


def snapshot(engine: Engine, app_id: str) -> Snapshot:
    containers = tuple(engine.containers(app_id))
    ours, cause = engine.our_restarts(app_id) if containers else ({}, "")
    app_restarts, restarting = engine.app_restart(app_id) if any(view.whole_app for view, _ in containers) else (0, False)
    # The engine counts restarts since the last start by hand, which were ours (restart_if_lost).
    # A replica retried with the whole app counts the app's restarts; while one is under way, a
    # replica it stopped (or not started yet) is restarting, not ended.
    containers = tuple((_counted(view, ours.get(view.key, 0), app_restarts, restarting), container)
                       for view, container in containers)
    end = engine.ends(app_id).get(app_id) if containers else None
    return Snapshot(app_id, containers, end, read_job((view for view, _ in containers), end), cause,
                    app_restarts)


def _counted(view: ContainerView, ours: int, app_restarts: int, restarting: bool) -> ContainerView:
    if not view.whole_app:
        return dataclasses.replace(view, restarts=ours + view.restarts)
    if restarting and view.status in ("exited", "created"):
        return dataclasses.replace(view, restarts=app_restarts, status="restarting")
    return dataclasses.replace(view, restarts=app_restarts)


def restart_app_if_failed(engine: Engine, current: Snapshot) -> Snapshot:
    """Start the whole app again, within the failing role's ``max_retries``, when a replica of a
    role of retry_policy APPLICATION (torchx's default) failed: every container is stopped (its
    grace period, then SIGKILL) and started again, and each resumes from the script's checkpoint."""
    if current.end is not None:
        return current
    failed = next((view for view, _ in current.containers if view.whole_app and view.status == "exited"
                   and view.exit_code not in (0, None) and view.restarts < view.max_retries), None)
    if failed is None:
        return current
    cause = f"replica {failed.key} ({failed.name}) {_how_it_ended(engine, current.app_id, failed)}"
    engine.restart_app(current.app_id, current.app_restarts + 1, cause,
                       [container for _, container in current.containers], current.grace_s)
    return snapshot(engine, current.app_id)


def kill_if_frozen(engine: Engine, current: Snapshot, paused_too_long: frozenset[str] = frozenset()) -> Snapshot:
    """Kill a replica its HEALTHCHECK calls unhealthy (its launcher has not touched its liveness
    file for 10 s: a frozen or hung replica never exits by itself, and the engine does not
    restart an unhealthy container), and one paused for longer than that (``paused_too_long``:
    container names, judged by whoever watches the clock, the watcher). Within ``max_retries`` it
    is started again, as a lost replica; else the job ends or an elastic role carries on, and its
    error report says why it was killed."""
    if current.end is not None:
        return current
    frozen = []
    for view, container in current.containers:
        if view.status == "paused" and view.name in paused_too_long:
            frozen.append((view, container, f"paused for over {DEFAULT_MAX_AGE_S:g} s"))
        elif view.status == "running" and view.health == "unhealthy":
            failed = engine.failed_probe(container)
            if failed is not None:
                frozen.append((view, container, failed))
    for view, container, why in frozen:
        engine.kill_for(current.app_id, view.key, view.restarts, container, f"gave no sign of life ({why}) and was killed")
    # Restarted (or failed) by the next steps, in this process or whichever sees the exit first.
    return snapshot(engine, current.app_id) if frozen else current


def restart_if_lost(engine: Engine, current: Snapshot) -> Snapshot:
    """Start again, within ``max_retries``, a replica that failed while the job runs on and that
    the engine will not restart: killed (``docker kill``, a lost node's way here), which the
    engine counts as stopped by hand. Its on-failure policy restarts everything else."""
    if current.end is not None:
        return current
    lost = [(view, container) for view, container in current.containers
            if view.status == "exited" and view.exit_code not in (0, None) and view.restarts < view.max_retries
            and not view.whole_app]  # those the app's restart starts again
    for view, container in lost:
        engine.restart(current.app_id, view.key, container, view.restarts + 1, view.max_retries,
                       f"replica {view.key} ({view.name}) {_how_it_ended(engine, current.app_id, view)}")
    return snapshot(engine, current.app_id) if lost else current


def _how_it_ended(engine: Engine, app_id: str, view: ContainerView) -> str:
    if view.exit_code != 137:
        return f"exited with code {view.exit_code}"
    return engine.kill_causes(app_id).get((view.key, view.restarts)) or "was killed with code 137"


def end_if_failed(engine: Engine, current: Snapshot) -> Snapshot:
    """When a replica failed for good and nobody has ended the job yet: record the end naming
    that replica (first writer wins) and stop the others, so that none waits at a barrier for
    a peer that is gone. Returns the job as it is afterwards."""
    failing = current.view.failing
    if not current.view.unended or failing is None:
        return current
    found = current.find(failing.role, failing.replica_id)
    cause = root_cause(engine, current.app_id, failing, found[1] if found else None)
    end = JobEnd(State.FAILED, failing.finished_at or time.time(), failure_message(failing, cause), replica=failing.key)
    engine.record_end(current.app_id, end)
    engine.stop(current.running, current.grace_s)
    return snapshot(engine, current.app_id)


def root_cause(engine: Engine, app_id: str, view: ContainerView, container: Any) -> str:
    """Why we killed it, else the launcher's error file in the container, else the engine's
    error, else stderr's tail."""
    killed_because = engine.kill_causes(app_id).get((view.key, view.restarts)) if view.exit_code == 137 else None
    if killed_because:
        return killed_because
    if container is not None:
        data = engine.read_file(container, ERROR_FILE)
        report = parse_error_report(data) if data else None
        if report is not None and report.message:
            return report.message
    if view.engine_error:
        return view.engine_error
    tail = engine.stderr_tail(container) if container is not None else ""
    return tail or "no error output"

"""local_docker: a job's replicas as containers on one engine, each on its own slice of the host.

torchx's builtin reports SUCCEEDED for an app that does not exist, calls a cancelled job
FAILED, gives every replica the whole machine and rebuilds the workspace image on every run.
Here the dry-run (``request.py``) places every replica on its own CPUs, NUMA nodes and GPUs;
``schedule`` creates the job's network and containers (all or nothing) and starts a watcher;
everything else reads the engine (``snapshot.py``), so it works from any shell, and finished
jobs keep their stopped containers (and logs) until ``delete``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx.specs import AppDef, AppDryRunInfo, Role, runopts
from torchx.workspace.api import WorkspaceMixin

from torchx_ext.error_file import ErrorReport
from torchx_ext.schedulers.common.app_ids import CONTAINER_NAME_IDS, new_app_id
from torchx_ext.schedulers.common.checks import seconds_option
from torchx_ext.stack_request import REQUEST_SIGNAL
from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.schedulers.common.scheduler import JobView, ReplicaReport, ReplicaKeys, SchedulerShell, describe_response
from torchx_ext.schedulers.common.states import JobEnd, State, app_state
from torchx_ext.schedulers.docker.options import DockerOpts, run_opts, workspace_opts
from torchx_ext.schedulers.docker.client import Engine, connect
from torchx_ext.schedulers.docker.view import read_job
from torchx_ext.schedulers.docker.request import (
    LABEL_APP_ID,
    LABEL_IMAGE,
    DockerJobRequest,
    build_request,
    describe_request,
)
from torchx_ext.schedulers.docker.snapshot import (Snapshot, end_if_failed, kill_if_frozen, restart_app_if_failed,
                                                  restart_if_lost, snapshot)
from torchx_ext.schedulers.docker.watcher import watcher_log
from torchx_ext.schedulers.placement import host_topology

EVENT_REPLAY_NS = 10**9

class DockerScheduler(WorkspaceMixin[None], SchedulerShell[DockerOpts]):
    image_hint = ""

    def __init__(self, session_name: str) -> None:
        super().__init__("local_docker", session_name)
        self._engine: Engine | None = None
        self._events_seen: dict[str, int] = {}
        """Per app: the time (unix ns) after which ``wait_for_change`` looks for the engine's next event."""

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = connect()
        return self._engine

    def _run_opts(self) -> runopts:
        return run_opts()

    def workspace_opts(self) -> runopts:
        return workspace_opts()

    def _submit_dryrun(self, app: AppDef, cfg: DockerOpts) -> AppDryRunInfo:
        request = build_request(
            app,
            app_id=new_app_id(app.name, CONTAINER_NAME_IDS),
            topology=host_topology(cfg.get("sysfs_root")) if cfg.get("slice_replicas") else None,
            shm_size=cfg.get("shm_size") or "auto",
            cancel_grace_s=seconds_option(cfg, "cancel_grace"),
            host_env=os.environ,
            copy_env=tuple(cfg.get("copy_env") or ()),
            env=dict(cfg.get("env") or {}),
            privileged=bool(cfg.get("privileged")),
        )
        return AppDryRunInfo(request, describe_request)

    def build_workspace_and_update_role(self, role: Role, workspace: str, cfg: Mapping[str, Any]) -> None:
        """The role's image with the workspace on top, built only when its content changed."""
        from torchx_ext.schedulers.images.progress import StatusLine
        from torchx_ext.schedulers.images.workspace import ensure_workspace_image

        kept = cfg.get("workspace_images_kept")
        built = ensure_workspace_image(self.engine.client, role.image, workspace, keep=3 if kept is None else int(kept),
                                       progress=StatusLine.on_stderr(quiet=bool(cfg.get("quiet"))))
        role.image = built.image

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        request: DockerJobRequest = dryrun_info.request
        engine = self.engine
        engine.create_job(request, engine.ensure_images(request.images))
        try:
            _start_watcher(request.app_id)
            engine.start_job(request)
        except Exception:
            engine.remove_job(request.app_id)  # force-removes: what did start is killed with it
            raise
        return request.app_id

    def describe(self, app_id: str) -> Optional[DescribeAppResponse]:
        """The job as its containers are now; a frozen replica (unhealthy) is killed, a replica lost
        within its retries is started again, and a job one of whose replicas failed for good is
        ended, here if its watcher has not done so yet (the others are stopped)."""
        engine = self.engine
        current = kill_if_frozen(engine, snapshot(engine, app_id))
        current = end_if_failed(engine, restart_if_lost(engine, restart_app_if_failed(engine, current)))
        if current.view.state is None:
            return None
        return _response(current)

    def wait_for_change(self, app_id: str, timeout_s: float) -> bool:
        """Until the engine reports an event of one of the job's containers (each event once)."""
        now = time.time_ns()
        # The first wait replays the last moment: an event between the caller's read and now.
        since = self._events_seen.get(app_id, now - EVENT_REPLAY_NS)
        until = now + int(timeout_s * 1e9)
        seen = self.engine.next_event(app_id, since, until)
        self._events_seen[app_id] = until if seen is None else seen + 1
        return seen is not None

    def list(self, cfg: Optional[Mapping[str, Any]] = None) -> list[ListAppResponse]:
        """Every local_docker app on the engine, deleted ones excepted (torchx-nightly passes
        ``cfg``; nothing in it changes what is listed)."""
        engine = self.engine
        by_app: dict[str, list[Any]] = {}
        for view, container in engine.containers():
            app = container.attrs.get("Config", {}).get("Labels", {}).get(LABEL_APP_ID, "")
            by_app.setdefault(app, []).append(view)
        ends = engine.ends()
        listed = []
        for app_id, views in sorted(by_app.items()):
            state = read_job(views, ends.get(app_id)).state
            listed.append(ListAppResponse(app_id=app_id, state=app_state(state)))
        return listed

    def _replica_lines(self, app_id: str, role_name: str, replica_id: int,
                       query: LogQuery) -> Iterable[tuple[float, str]]:
        from torchx_ext.schedulers.docker.logs import container_lines

        current = snapshot(self.engine, app_id)
        if not current.containers:
            raise self.unknown_app(app_id)
        found = current.find(role_name, replica_id)
        if found is None:
            raise self.unknown_replica(app_id, role_name, replica_id, sorted(view.key for view, _ in current.containers))
        return container_lines(self.engine.client, found[1].id, query)

    def ask_for_stacks(self, app_id: str, role_name: str | None = None,
                       replica_id: int | None = None) -> ReplicaKeys:
        current = snapshot(self.engine, app_id)
        if not current.containers:
            raise self.unknown_app(app_id)
        chosen = self.stack_targets(app_id, [(view.role, view.replica_id, view.status == "running")
                                             for view, _ in current.containers], role_name, replica_id)
        for view, container in current.containers:
            if (view.role, view.replica_id) in chosen and view.status == "running":
                # To the container's init, which passes it on to the launcher.
                container.kill(signal=int(REQUEST_SIGNAL))
        return chosen

    def _cancel_existing(self, app_id: str) -> None:
        current = snapshot(self.engine, app_id)
        if current.view.state is None:
            return
        if current.view.state.terminal and not current.running:
            return
        if current.end is None:
            self.engine.record_end(app_id, JobEnd(State.CANCELLED, time.time(), "cancelled by request"))
        self.engine.stop(current.running, current.grace_s)

    def _delete_existing(self, app_id: str) -> None:
        """Cancel the job if it runs, then remove its containers (logs included), network and records."""
        self._cancel_existing(app_id)
        self.engine.remove_job(app_id)
        watcher_log(app_id).unlink(missing_ok=True)

    def close(self) -> None:
        # Containers are the engine's, not this process's: jobs outlive the CLI that started
        # them (as on a cluster) until cancelled or deleted.
        if self._engine is not None:
            self._engine.client.close()
            self._engine = None


def create_scheduler(session_name: str, **kwargs: Any) -> DockerScheduler:
    return DockerScheduler(session_name)


def _response(current: Snapshot) -> DescribeAppResponse:
    view = current.view
    assert view.state is not None  # an app with no container is not described
    end = current.end
    failing = view.failing
    error = None
    if end and failing:
        error = ErrorReport(message=end.message, error_code=failing.exit_code,
                            timestamp=int(failing.finished_at or time.time()))
    roles: dict[str, Role] = {}
    replicas = []
    for container_view, container in sorted(current.containers, key=lambda pair: (pair[1].attrs.get("Created", ""),
                                                                                   pair[0].replica_id)):
        labels = container.attrs.get("Config", {}).get("Labels", {})
        roles[container_view.role] = Role(name=container_view.role, image=labels.get(LABEL_IMAGE, ""),
                                          num_replicas=container_view.role_replicas,
                                          min_replicas=container_view.min_replicas)
        replicas.append(ReplicaReport(container_view.role, container_view.replica_id,
                                      view.replicas[(container_view.role, container_view.replica_id)],
                                      container_view.name, error if failing is container_view else None))
    # Every replica's restarts, summed: num_restarts means that on every scheduler.
    restarts = current.app_restarts + sum(view.restarts for view, _ in current.containers if not view.whole_app)
    spares = sorted((replica.role, replica.replica_id) for replica, _ in current.containers
                    if replica.spare and view.replicas[(replica.role, replica.replica_id)] is State.RUNNING)
    elastic = {replica.role: replica.min_replicas for replica, _ in current.containers if replica.elastic}
    return describe_response(JobView(
        current.app_id, view.state, list(roles.values()), replicas, num_restarts=restarts, error=error,
        message=end.message if end else "", last_failure=current.last_restart_cause, spares=spares, elastic=elastic))


def _start_watcher(app_id: str) -> None:
    log_path = watcher_log(app_id)
    log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # Started in its log directory: `-m` puts the cwd first on sys.path, and the user's
        # directory may hold modules named like the standard library's.
        subprocess.Popen(
            [sys.executable, "-m", "torchx_ext.schedulers.docker.watcher", app_id],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=log_path.parent,
        )


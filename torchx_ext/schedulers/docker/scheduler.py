"""local_docker: a job's replicas as containers on one engine, each on its own slice of the host.

torchx's builtin reports SUCCEEDED for an app that does not exist, calls a cancelled job
FAILED, gives every replica the whole machine and rebuilds the workspace image on every run.
Here the dry-run (``request.py``) places every replica on its own CPUs, NUMA nodes and GPUs;
``schedule`` creates the job's network and containers (all or nothing) and starts a watcher;
everything else reads the engine (``tracking.py``), so it works from any shell, and finished
jobs keep their stopped containers (and logs) until ``delete``.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any, Optional, TypedDict

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler, Stream
from torchx.specs import AppDef, AppDryRunInfo, ReplicaStatus, Role, RoleStatus, runopts
from torchx.workspace.api import WorkspaceMixin

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT, planning_cpus, read_topology
from torchx_ext.schedulers.common.app_ids import DOCKER, new_app_id
from torchx_ext.schedulers.common.states import State, app_state
from torchx_ext.schedulers.docker.engine import Engine, connect
from torchx_ext.schedulers.docker.job import JobEnd, read_job
from torchx_ext.schedulers.docker.request import (
    LABEL_APP_ID,
    LABEL_IMAGE,
    LABEL_ROLE_REPLICAS,
    DockerJobRequest,
    build_request,
    describe_request,
)
from torchx_ext.schedulers.docker.tracking import Snapshot, end_if_failed, error_report, snapshot
from torchx_ext.schedulers.docker.watcher import watcher_log


class DockerOpts(TypedDict, total=False):
    slice_replicas: Optional[bool]
    sysfs_root: Optional[str]
    shm_size: Optional[str]
    cancel_grace: Optional[int]
    workspace_images_kept: Optional[int]


class DockerScheduler(WorkspaceMixin[None], Scheduler[DockerOpts]):
    def __init__(self, session_name: str) -> None:
        super().__init__("local_docker", session_name)
        self._engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = connect()
        return self._engine

    def _run_opts(self) -> runopts:
        opts = runopts()
        opts.add("slice_replicas", type_=bool, default=True,
                 help="give each replica container its own cpuset (whole NUMA nodes, else whole cores), "
                 "memory nodes and GPUs; false: every container may use the whole host")
        opts.add("sysfs_root", type_=str, default=DEFAULT_SYSFS_ROOT,
                 help="read the host topology from this sysfs tree (another tree: plan, e.g. with --dryrun, "
                 "as if on that machine)")
        opts.add("shm_size", type_=str, default="auto",
                 help="size of each container's /dev/shm, which counts against its memory limit: 'auto' "
                 "(half the role's memMB, 2g without a limit) or a size such as 512m, 8g")
        opts.add("cancel_grace", type_=int, default=10,
                 help="seconds between SIGTERM and SIGKILL when a job is cancelled or ended by a failed replica")
        opts.add("workspace_images_kept", type_=int, default=3,
                 help="cached workspace images kept per workspace directory (older ones are removed)")
        return opts

    def _validate(self, app: AppDef, scheduler: str, cfg: Optional[Mapping[str, Any]] = None) -> None:
        for role in app.roles:
            if not role.image:
                raise InvalidArgumentError(f"role {role.name!r} has no image: give one with --image")

    def _submit_dryrun(self, app: AppDef, cfg: DockerOpts) -> AppDryRunInfo:
        grace = cfg.get("cancel_grace")
        if grace is None or grace < 0:
            raise InvalidArgumentError(f"invalid cancel_grace {grace!r}: expected seconds, 0 or more")
        request = build_request(
            app,
            app_id=new_app_id(app.name, DOCKER),
            topology=_host_topology(cfg) if cfg.get("slice_replicas") else None,
            shm_size=cfg.get("shm_size") or "auto",
            cancel_grace_s=int(grace),
        )
        return AppDryRunInfo(request, describe_request)

    def build_workspace_and_update_role(self, role: Role, workspace: str, cfg: Mapping[str, Any]) -> None:
        """The role's image with the workspace on top, built only when its content changed."""
        from torchx_ext.schedulers.docker.workspace import ensure_workspace_image

        kept = cfg.get("workspace_images_kept")
        built = ensure_workspace_image(self.engine.client, role.image, workspace, keep=3 if kept is None else int(kept))
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
        """The job as its containers are now; a job one of whose replicas failed for good is
        ended here if its watcher has not done so yet (the others are stopped)."""
        current = end_if_failed(self.engine, snapshot(self.engine, app_id))
        if current.view.state is None:
            return None
        return _response(current)

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

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: Optional[str] = None,
        since: Optional[datetime.datetime] = None,
        until: Optional[datetime.datetime] = None,
        should_tail: bool = False,
        streams: Optional[Stream] = None,
    ) -> Iterable[str]:
        from torchx_ext.schedulers.common.logs import LogQuery
        from torchx_ext.schedulers.docker.logs import container_lines

        query = LogQuery.of(regex=regex, since=since, until=until, streams=streams, should_tail=should_tail)
        current = snapshot(self.engine, app_id)
        if not current.containers:
            raise InvalidArgumentError(
                f"unknown local_docker app {app_id!r}: `torchx list -s local_docker` shows the known ones")
        found = current.find(role_name, k)
        if found is None:
            known = ", ".join(sorted(view.key for view, _ in current.containers))
            raise InvalidArgumentError(f"app {app_id} has no replica {role_name}/{k}: it has {known}")
        return query.select(container_lines(self.engine.client, found[1].id, query))

    def _cancel_existing(self, app_id: str) -> None:
        current = snapshot(self.engine, app_id)
        if current.view.state is None:
            return
        if current.view.state.terminal and not current.running:
            return
        if current.end is None:
            self.engine.record_end(app_id, JobEnd(State.CANCELLED, time.time(), "", "cancelled by request"))
        self.engine.stop(current.running, current.grace_s)

    def delete(self, app_id: str) -> None:
        """Cancel the job if it runs, then remove its containers (logs included), network and
        records (torchx-nightly's ``torchx delete``; ours on torchx 0.7.0)."""
        self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
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
    end = current.end
    failing = view.failing
    error = error_report(end.message, failing.exit_code, failing.finished_at) if end and failing else None
    roles: dict[str, list[ReplicaStatus]] = {}
    images: dict[str, str] = {}
    counts: dict[str, int] = {}
    for container_view, container in sorted(current.containers, key=lambda pair: (pair[1].attrs.get("Created", ""),
                                                                                   pair[0].replica_id)):
        labels = container.attrs.get("Config", {}).get("Labels", {})
        images[container_view.role] = labels.get(LABEL_IMAGE, "")
        counts[container_view.role] = int(labels.get(LABEL_ROLE_REPLICAS, "1"))
        roles.setdefault(container_view.role, []).append(ReplicaStatus(
            id=container_view.replica_id,
            state=app_state(view.replicas[(container_view.role, container_view.replica_id)]),
            role=container_view.role,
            hostname=container_view.name,
            structured_error_msg=error if error and failing is container_view else "<NONE>",
        ))
    response = DescribeAppResponse(
        app_id=current.app_id,
        state=app_state(view.state),
        num_restarts=max((container_view.restarts for container_view, _ in current.containers), default=0),
        msg=end.message if end else "",
        roles=[Role(name=name, image=images[name], num_replicas=counts[name]) for name in roles],
        roles_statuses=[RoleStatus(name, sorted(replicas, key=lambda replica: replica.id))
                        for name, replicas in roles.items()],
    )
    if error:
        response.structured_error_msg = error
    return response


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


def _host_topology(cfg: DockerOpts) -> Any:
    # As local_cwd: planned for all CPUs of the tree (another machine's tree, a fixture), since
    # containers are pinned by the engine, not by this process's own affinity.
    root = cfg.get("sysfs_root") or DEFAULT_SYSFS_ROOT
    return read_topology(root, allowed_cpus=planning_cpus(root, applying=False))

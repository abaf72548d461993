"""local_cwd: run a job's replicas as processes on this host, each on its own slice of it.

torchx's builtin gives every replica the whole machine, a fixed rendezvous port, and forgets
a job when the submitting CLI exits. Here ``schedule`` writes the request into the job's
directory and starts a supervisor (``supervisor.py``) in a session of its own; everything
else (describe, log_iter, cancel, list) reads and acts on that directory, so it works the
same from the submitting CLI and from a new shell, while the job runs and after it ends.
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional, TypedDict

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler, Stream
from torchx.specs import NONE, AppDef, AppDryRunInfo, AppState, ReplicaStatus, RoleStatus, runopts

from torchx_ext.errors import InvalidArgumentError, JobRecordError
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT, planning_cpus, read_topology
from torchx_ext.schedulers.common.app_ids import LOCAL, new_app_id
from torchx_ext.schedulers.common.states import State, app_state
from torchx_ext.schedulers.local.records import (
    JobDir,
    JobState,
    ReplicaState,
    find_job,
    marked_processes,
    SupervisorRecord,
    register,
    registered_jobs,
    registry,
    signal_process,
    stop_processes,
    state_root,
)
from torchx_ext.schedulers.local.request import build_request, describe_request, role_from_spec

logger = logging.getLogger("torchx_ext.local_cwd")
# After its grace period the supervisor SIGKILLs; give it that long and a little more.
CANCEL_MARGIN_S = 5.0


class LocalOpts(TypedDict, total=False):
    log_dir: Optional[str]
    prepend_cwd: Optional[bool]
    slice_replicas: Optional[bool]
    sysfs_root: Optional[str]
    cancel_grace: Optional[int]


class LocalScheduler(Scheduler[LocalOpts]):  # type: ignore[misc]  # torchx has no types
    def __init__(self, session_name: str) -> None:
        super().__init__("local_cwd", session_name)
        self._submitted: list[str] = []

    def _run_opts(self) -> runopts:
        opts = runopts()
        opts.add("log_dir", type_=str, default=None,
                 help=f"directory for the jobs' logs and records (default {state_root() / 'logs'}); "
                 "each job writes {log_dir}/{app_id}")
        opts.add("prepend_cwd", type_=bool, default=False,
                 help="put the current directory before (not after) PATH's entries")
        opts.add("slice_replicas", type_=bool, default=True,
                 help="give each replica its own CPUs (whole NUMA nodes, else whole cores) and GPUs; "
                 "false: every replica may use the whole host")
        opts.add("sysfs_root", type_=str, default=DEFAULT_SYSFS_ROOT,
                 help="read the host topology from this sysfs tree (another tree: plan, e.g. with --dryrun, "
                 "as if on that machine)")
        opts.add("cancel_grace", type_=int, default=10,
                 help="seconds between SIGTERM and SIGKILL when a job is cancelled or fails")
        return opts

    def _validate(self, app: AppDef, scheduler: str, cfg: Optional[Mapping[str, Any]] = None) -> None:
        pass  # local replicas need no resource request (cfg: torchx-nightly passes it, 0.7.0 does not)

    def _submit_dryrun(self, app: AppDef, cfg: LocalOpts) -> AppDryRunInfo:
        app_id = new_app_id(app.name, LOCAL)
        log_dir = Path(cfg.get("log_dir") or state_root() / "logs")
        grace = cfg.get("cancel_grace")
        if grace is None or grace < 0:
            raise InvalidArgumentError(f"invalid cancel_grace {grace!r}: expected seconds, 0 or more")
        request = build_request(
            app,
            app_id=app_id,
            app_dir=str((log_dir / app_id).absolute()),
            cwd=os.getcwd(),
            interpreter=sys.executable,
            environ=os.environ,
            topology=_host_topology(cfg) if cfg.get("slice_replicas") else None,
            prepend_cwd=bool(cfg.get("prepend_cwd")),
            cancel_grace_s=float(grace),
        )
        return AppDryRunInfo(request, describe_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        request = dryrun_info.request
        job = JobDir(Path(request.app_dir))
        try:
            job.create(request, JobState(request.app_id, State.SUBMITTED, time.time(), []))
            register(request.app_id, job.path)
        except OSError as error:
            raise InvalidArgumentError(
                f"cannot write the job's directory {job.path} ({error.strerror or error}): "
                "give a writable directory with -cfg log_dir=DIR"
            ) from None
        import subprocess  # here: a dry run (and every other command) does without it

        with open(job.supervisor_log, "ab") as log:
            # Started in the job directory: `-m` puts the cwd first on sys.path, and the
            # user's directory may hold modules named like the standard library's.
            process = subprocess.Popen(
                [sys.executable, "-m", "torchx_ext.schedulers.local.supervisor", str(job.path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=job.path,
            )
        job.supervisor.write_text(str(SupervisorRecord.of(process.pid)))
        self._submitted.append(request.app_id)
        return str(request.app_id)

    def describe(self, app_id: str) -> Optional[DescribeAppResponse]:
        job = find_job(app_id)
        if job is None:
            return None
        try:
            state = _current_state(job)
            request = job.read_request()
        except JobRecordError as error:
            # The job exists but its record is unreadable: say so rather than "not found".
            return DescribeAppResponse(app_id=app_id, state=AppState.UNKNOWN, msg=f"unreadable job record: {error}",
                                       ui_url=f"file://{job.path}")
        errors = {
            (replica.role, replica.replica_id): _error_report(replica, state.ended_at)
            for replica in state.replicas
            if replica.state is State.FAILED
        }
        states = {(replica.role, replica.replica_id): replica.state for replica in state.replicas}
        response = DescribeAppResponse(
            app_id=app_id,
            state=app_state(state.state),
            num_restarts=state.num_restarts,
            msg=state.msg,
            ui_url=f"file://{job.path}",
            roles=[role_from_spec(role.spec) for role in request.roles],
        )
        for role in request.roles:
            replicas = [
                ReplicaStatus(
                    id=replica.replica_id,
                    state=_replica_app_state(states.get((role.name, replica.replica_id)), state.state),
                    role=role.name,
                    hostname="localhost",
                    structured_error_msg=errors.get((role.name, replica.replica_id), NONE),
                )
                for replica in role.replicas
            ]
            response.roles_statuses.append(RoleStatus(role.name, replicas))
        failed = next((replica for replica in state.replicas if replica.state is State.FAILED), None)
        if failed is not None:
            response.structured_error_msg = errors[(failed.role, failed.replica_id)]
        return response

    def describe_native(self, app_id: str) -> Optional[AppDryRunInfo]:
        """The request the job was submitted with (torchx-nightly's read-back of a dry-run)."""
        job = find_job(app_id)
        try:
            return None if job is None else AppDryRunInfo(job.read_request(), describe_request)
        except JobRecordError:
            return None

    def list(self, cfg: Optional[Mapping[str, Any]] = None) -> list[ListAppResponse]:
        """Every registered job; one that cannot be read is left out with a warning naming its
        file (torchx-nightly passes ``cfg``; nothing in it changes what local_cwd lists)."""
        listed = []
        for app_id in registered_jobs():
            job = find_job(app_id)
            if job is None:
                continue
            try:
                state = _current_state(job).state
            except JobRecordError as error:
                print(f"warning: local_cwd: skipping job {app_id}: {error}", file=sys.stderr)
                continue
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
        job = find_job(app_id)
        if job is None:
            raise InvalidArgumentError(f"unknown local_cwd app {app_id!r}: `torchx list -s local_cwd` shows the known ones")
        # Imported here: only `torchx log` needs them, every other command starts faster.
        from torchx_ext.schedulers.common.logs import LogQuery
        from torchx_ext.schedulers.local.logs import read_timed_lines

        query = LogQuery.of(regex=regex, since=since, until=until, streams=streams, should_tail=should_tail)
        replicas = {(replica.role, replica.replica_id): replica for replica in job.read_request().replicas()}
        replica = replicas.get((role_name, k))
        if replica is None:
            known = ", ".join(f"{role}/{index}" for role, index in replicas)
            raise InvalidArgumentError(f"app {app_id} has no replica {role_name}/{k}: it has {known}")
        lines = read_timed_lines(
            replica.log_path(query.stream),
            should_tail=query.should_tail,
            finished=lambda: _current_state(job).state.terminal,
        )
        return query.select(lines)

    def _cancel_existing(self, app_id: str) -> None:
        job = find_job(app_id)
        if job is None or job.read_state().state.terminal:
            return
        record = job.supervisor_record()
        if record is not None and not record.on_this_host():
            raise InvalidArgumentError(f"local_cwd app {app_id} runs on host {record.host}: cancel it there")
        job.cancel.write_text(str(time.time()))
        grace = job.read_request().cancel_grace_s
        if record is not None and job.supervisor_alive():
            signal_process(record.pid, signal.SIGTERM)
            # The supervisor may need two grace periods (replicas, then what they left) and a
            # little more; past that it is stuck, and it is stopped so that one writer remains.
            deadline = time.monotonic() + 2 * grace + CANCEL_MARGIN_S
            while job.supervisor_alive() and not job.read_state().state.terminal:
                if time.monotonic() > deadline:
                    signal_process(record.pid, signal.SIGKILL)
                    break
                time.sleep(0.05)
            while job.supervisor_alive() and not job.read_state().state.terminal:
                time.sleep(0.05)  # SIGKILLed: gone in a moment
        if job.read_state().state.terminal:
            return
        # The supervisor is gone (killed, or the host rebooted under it): stop what it left.
        stop_processes(lambda: marked_processes(app_id), grace)
        state = job.read_state()
        state.state, state.ended_at, state.msg = State.CANCELLED, time.time(), "cancelled by request (its supervisor was gone)"
        job.write_state(state)

    def delete(self, app_id: str) -> None:
        """Cancel the job if it runs, then remove its directory (logs included) and its entry
        (torchx-nightly's ``torchx delete``)."""
        job = find_job(app_id)
        if job is None:
            return
        self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
        job = find_job(app_id)
        if job is None:
            return
        try:
            self._cancel_existing(app_id)
        except JobRecordError:
            pass  # an unreadable record: nothing of it can be running under our supervision
        record = job.supervisor_record()
        if record is not None and not record.on_this_host() and job.supervisor_alive():
            raise InvalidArgumentError(f"local_cwd app {app_id} runs on host {record.host}: delete it there")
        shutil.rmtree(job.path, ignore_errors=True)
        (registry() / app_id).unlink(missing_ok=True)

    def close(self) -> None:
        # Like torchx's local scheduler: jobs this scheduler object started end with it
        # (Ctrl+C on `torchx run`); jobs whose CLI was killed keep running until cancelled.
        for app_id in self._submitted:
            try:
                self.cancel(app_id)
            except Exception:  # close must not raise
                pass
        self._submitted.clear()


def create_scheduler(session_name: str, **kwargs: Any) -> LocalScheduler:
    return LocalScheduler(session_name)


def _current_state(job: JobDir) -> JobState:
    state = job.read_state()
    if state.state.terminal or job.supervisor_alive():
        return state
    if job.supervisor_record() is None:
        return state  # being submitted this very moment
    state = job.read_state()  # it may have finished between the two reads above
    if state.state.terminal:
        return state
    # The supervisor died (killed, out of memory) without ending the job. Nobody captures the
    # replicas' output or restarts them any more, and torchx will not cancel a job it is told
    # has failed: whoever notices first stops what is left and records the end.
    stop_processes(lambda: marked_processes(state.app_id), 0)
    state.state, state.ended_at = State.FAILED, time.time()
    state.msg = f"the job's supervisor ended without recording an end (see {job.supervisor_log}); its processes were stopped"
    job.write_state(state)
    return state


def _error_report(replica: ReplicaState, ended_at: float | None) -> str:
    # torchx parses these as torchelastic error files (its status formatting needs the message,
    # a timestamp and an error code), so the root cause is given in that shape.
    from torchx_ext.schedulers.common.error_file import ErrorReport

    stamp = int(ended_at or time.time())
    return ErrorReport(message=replica.error, error_code=replica.exit_code, timestamp=stamp).to_json()


def _replica_app_state(state: State | None, job_state: State) -> AppState:
    if state is None:  # not started (yet)
        return AppState.SUBMITTED if job_state is State.SUBMITTED else AppState.UNKNOWN
    return app_state(state)


def _host_topology(cfg: LocalOpts) -> Any:
    # Slices are planned before anyone knows whether the job will run here: a tree of another
    # machine (a fixture, a snapshot) is planned for all of its CPUs, as a --dryrun shows it.
    root = cfg.get("sysfs_root") or DEFAULT_SYSFS_ROOT
    return read_topology(root, allowed_cpus=planning_cpus(root, applying=False))

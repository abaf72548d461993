"""local_cwd: run a job's replicas as processes on this host, each on its own slice of it.

torchx's builtin gives every replica the whole machine, a fixed rendezvous port, and forgets
a job when the submitting CLI exits. Here ``schedule`` writes the request into the job's
directory and starts a supervisor (``supervisor.py``) in a session of its own; everything
else (describe, log_iter, cancel, list) reads and acts on that directory, so it works the
same from the submitting CLI and from a new shell, while the job runs and after it ends.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx.specs import AppDef, AppDryRunInfo, AppState, runopts

from torchx_ext.error_file import ErrorReport
from torchx_ext.errors import InvalidArgumentError, JobRecordError
from torchx_ext.schedulers.common.app_ids import FILE_NAME_IDS, new_app_id
from torchx_ext.schedulers.common.checks import seconds_option
from torchx_ext.schedulers.common.job_dir import submitted_request
from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.schedulers.common.scheduler import JobView, ReplicaReport, ReplicaKeys, SchedulerShell, describe_response
from torchx_ext.schedulers.common.states import State, app_state
from torchx_ext.liveness import is_spare
from torchx_ext.schedulers.common.watch import RecordWatch, file_signature
from torchx_ext.stack_request import REQUEST_SIGNAL
from torchx_ext.schedulers.local.processes import marked_processes, signal_process, stop_processes
from torchx_ext.schedulers.local.records import (JOBS, LIVENESS_FILE_NAME, STEPPED_ASIDE, JobState, LocalJobDir, ReplicaState,
                                                 SupervisorRecord)
from torchx_ext.schedulers.common.role_spec import role_from_spec
from torchx_ext.schedulers.local.options import LocalOpts, run_opts
from torchx_ext.schedulers.local.targets import check_targets
from torchx_ext.schedulers.local.build import build_request, describe_request
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT, Topology
from torchx_ext.schedulers.placement import gpu_count, host_topology

logger = logging.getLogger("torchx_ext.local_cwd")
# After its grace period the supervisor SIGKILLs; give it that long and a little more.
CANCEL_MARGIN_S = 5.0


def _gpus_to_split(sysfs_root: str | None, topology: Topology | None) -> int:
    """The GPUs auto_set_cuda_visible_devices divides: as torchx counts them (``nvidia-smi -L``:
    those this process may use, a device cgroup's limit included) on this host; a sysfs tree's
    GPUs where one is given, or where nvidia-smi does not answer."""
    if not sysfs_root or sysfs_root == DEFAULT_SYSFS_ROOT:
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            listed = None
        if listed is not None and listed.returncode == 0:
            return len([line for line in listed.stdout.splitlines() if line.strip()])
    return gpu_count(topology or host_topology(sysfs_root))


class LocalScheduler(SchedulerShell[LocalOpts]):
    def __init__(self, session_name: str) -> None:
        super().__init__("local_cwd", session_name)
        self._submitted: list[str] = []
        self._records = RecordWatch()

    def _run_opts(self) -> runopts:
        return run_opts()

    def _submit_dryrun(self, app: AppDef, cfg: LocalOpts) -> AppDryRunInfo:
        app_id = new_app_id(app.name, FILE_NAME_IDS)
        log_dir = Path(cfg.get("log_dir") or JOBS.state_root() / "logs")
        grace = seconds_option(cfg, "cancel_grace")
        check_targets(app, os.getcwd(), os.environ)
        topology = host_topology(cfg.get("sysfs_root")) if cfg.get("slice_replicas") else None
        split = cfg.get("auto_set_cuda_visible_devices")
        request = build_request(
            app,
            app_id=app_id,
            app_dir=str((log_dir / app_id).absolute()),
            cwd=os.getcwd(),
            interpreter=sys.executable,
            environ=os.environ,
            topology=topology,
            prepend_cwd=bool(cfg.get("prepend_cwd")),
            cancel_grace_s=float(grace),
            gpus_to_split=_gpus_to_split(cfg.get("sysfs_root"), topology) if split else None,
            warm=bool(cfg.get("warm")),
        )
        return AppDryRunInfo(request, describe_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        request = dryrun_info.request
        job = LocalJobDir(Path(request.app_dir))
        try:
            job.create(request, JobState(request.app_id, State.SUBMITTED, time.time(), []))
            JOBS.register(request.app_id, job.path)
        except OSError as error:
            raise InvalidArgumentError(
                f"cannot write the job's directory {job.path} ({error.strerror or error}): "
                "give a writable directory with -cfg log_dir=DIR"
            ) from None
        import subprocess  # here: a dry run (and every other command) does without it

        with open(job.supervisor_log, "ab") as log:
            # Started in the job directory: `-m` puts the cwd first on sys.path, and the
            # user's directory may hold modules named like the standard library's.
            pid = _warm_supervisor(job, log.fileno()) if request.warm else None
            if pid is not None:
                _until_started(job, WARM_START_WAIT_S)
            else:
                pid = subprocess.Popen(
                    [sys.executable, "-m", SUPERVISOR, str(job.path)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=job.path,
                ).pid
        job.record_supervisor(SupervisorRecord.of(pid), unless_recorded=True)
        self._submitted.append(request.app_id)
        return str(request.app_id)

    def describe(self, app_id: str) -> Optional[DescribeAppResponse]:
        job = JOBS.find(app_id)
        if job is None:
            return None
        try:
            state = _read_state_ending_orphaned_job(job)
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
        # A replica not started yet is SUBMITTED with its job, else not reported (UNKNOWN).
        not_started = State.SUBMITTED if state.state is State.SUBMITTED else None
        failed = next((replica for replica in state.replicas if replica.state is State.FAILED), None)
        spares = [(replica.role, replica.replica_id) for replica in request.replicas()
                  if states.get((replica.role, replica.replica_id)) is State.RUNNING
                  and is_spare(str(Path(replica.log_dir, LIVENESS_FILE_NAME)))]
        return describe_response(JobView(
            app_id,
            state.state,
            roles=[role_from_spec(role.spec, role.policy) for role in request.roles],
            replicas=[
                ReplicaReport(replica.role, replica.replica_id, states.get((replica.role, replica.replica_id), not_started),
                              "localhost", errors.get((replica.role, replica.replica_id)))
                for replica in request.replicas()
            ],
            error=errors[(failed.role, failed.replica_id)] if failed is not None else None,
            num_restarts=state.num_restarts,
            message=state.msg,
            last_failure=state.last_failure,
            spares=spares,
            elastic={role.name: role.policy.min_replicas for role in request.roles if role.policy.is_elastic},
            ui_url=f"file://{job.path}",
        ))

    def wait_for_change(self, app_id: str, timeout_s: float) -> bool:
        """Until the supervisor writes the job's state again (a replica started, restarted or
        ended; the job ended)."""
        job = JOBS.find(app_id)
        if job is None:
            return True
        return self._records.wait(app_id, lambda: file_signature(job.state), timeout_s)

    def describe_native(self, app_id: str) -> Optional[AppDryRunInfo]:
        """The request the job was submitted with (torchx-nightly's read-back of a dry-run)."""
        return submitted_request(JOBS.find(app_id), describe_request)

    def list(self, cfg: Optional[Mapping[str, Any]] = None) -> list[ListAppResponse]:
        """Every registered job; one that cannot be read is left out with a warning naming its
        file (torchx-nightly passes ``cfg``; nothing in it changes what local_cwd lists)."""
        listed = []
        for app_id in JOBS.app_ids():
            job = JOBS.find(app_id)
            if job is None:
                continue
            try:
                state = _read_state_ending_orphaned_job(job).state
            except JobRecordError as error:
                print(f"warning: local_cwd: skipping job {app_id}: {error}", file=sys.stderr)
                continue
            listed.append(ListAppResponse(app_id=app_id, state=app_state(state)))
        return listed

    def _replica_lines(self, app_id: str, role_name: str, replica_id: int,
                       query: LogQuery) -> Iterable[tuple[float, str]]:
        job = self.recorded_job(JOBS, app_id)
        replicas = {(replica.role, replica.replica_id): replica for replica in job.read_request().replicas()}
        self.check_replica(app_id, role_name, replica_id, replicas.keys())
        # Imported here: only `torchx log` needs it, every other command starts faster.
        from torchx_ext.schedulers.common.log_files import read_timed_lines

        return read_timed_lines(
            replicas[role_name, replica_id].log_path(query.stream),
            should_tail=query.should_tail,
            finished=lambda: _read_state_ending_orphaned_job(job).state.terminal,
        )

    def ask_for_stacks(self, app_id: str, role_name: str | None = None,
                       replica_id: int | None = None) -> ReplicaKeys:
        job = self.recorded_job(JOBS, app_id)
        record = job.supervisor_record()
        if record is not None and not record.on_this_host():
            raise InvalidArgumentError(f"local_cwd app {app_id} runs on host {record.host}: ask there")
        replicas = job.read_state().replicas
        chosen = self.stack_targets(app_id, [(replica.role, replica.replica_id, replica.state == State.RUNNING
                                              and replica.pid is not None) for replica in replicas],
                                    role_name, replica_id)
        for replica in replicas:
            if (replica.role, replica.replica_id) in chosen and replica.pid is not None:
                signal_process(replica.pid, REQUEST_SIGNAL)  # the replica's process is its launcher
        return chosen

    def _cancel_existing(self, app_id: str) -> None:
        job = JOBS.find(app_id)
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
                    now_recorded = job.supervisor_record() or record  # a late second one hands over to the first
                    signal_process(now_recorded.pid, signal.SIGKILL)
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

    def _delete_existing(self, app_id: str) -> None:
        """Cancel the job if it runs, then remove its directory (logs included) and its entry."""
        job = JOBS.find(app_id)
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
        JOBS.unregister(app_id)

    def close(self) -> None:
        # Like torchx's local scheduler: jobs this scheduler object started end with it
        # (Ctrl+C on `torchx run`); jobs whose CLI was killed keep running until cancelled.
        for app_id in self._submitted:
            try:
                self.cancel(app_id)
            except Exception:  # close must not raise
                pass
        self._submitted.clear()


SUPERVISOR = "torchx_ext.schedulers.local.supervisor"


WARM_START_WAIT_S = 0.5


def _until_started(job: LocalJobDir, timeout_s: float) -> None:
    """Waits (a few ms) until the warm supervisor started the replicas: torchx's CLI asks once
    whether a job it follows has started and, if not yet, sleeps a whole second, more than a warm
    job may take in all."""
    deadline = time.monotonic() + timeout_s
    while job.read_state().state is State.SUBMITTED and time.monotonic() < deadline:
        time.sleep(0.005)


def _warm_supervisor(job: LocalJobDir, log: int) -> int | None:
    """The job's supervisor forked by the warm interpreter (None: none answered; one is started
    for the next job, and this one starts cold)."""
    from torchx_ext.warm.client import run_module

    with open(os.devnull, "rb") as nothing:
        return run_module(SUPERVISOR, [str(job.path)], cwd=str(job.path), env=os.environ,
                          streams=(nothing.fileno(), log, log))


def create_scheduler(session_name: str, **kwargs: Any) -> LocalScheduler:
    return LocalScheduler(session_name)


def _read_state_ending_orphaned_job(job: LocalJobDir) -> JobState:
    """The job's state; a job whose supervisor died without ending it is ended here (what it
    left is stopped, FAILED recorded), whoever looks first."""
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
    last = _last_line(job.supervisor_log)
    state.msg = (f"the job's supervisor ended without recording an end ({f'its last line: {last!r}; ' if last else ''}"
                 f"see {job.supervisor_log}); its processes were stopped")
    job.write_state(state)
    return state


def _last_line(path: Path, tail_bytes: int = 4096) -> str:
    """The last line the job's supervisor wrote ('' if none or unreadable), not one of a second
    supervisor that stepped aside or of the warm client: what a dead supervisor said last."""
    from torchx_ext.warm.client import CLIENT_SAYS  # here: the other commands start without it

    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - tail_bytes))
            lines = [line for line in file.read().decode(errors="replace").strip().splitlines()
                     if STEPPED_ASIDE not in line and CLIENT_SAYS not in line]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def _error_report(replica: ReplicaState, ended_at: float | None) -> ErrorReport:
    # torchx's status formatting needs the message, a timestamp and an error code.
    return ErrorReport(message=replica.error, error_code=replica.exit_code, timestamp=int(ended_at or time.time()))

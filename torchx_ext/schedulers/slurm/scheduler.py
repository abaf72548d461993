"""slurm: a job's replicas as the tasks of one Slurm job, one per node, bound inside what Slurm gave.

``schedule`` writes the job directory (``records.py``) and queues the batch script
(``request.py``) with ``sbatch``; the app id is the Slurm job id. ``describe`` asks Slurm
(``commands.JobStates``: sacct, else squeue), keeps a job's end once Slurm reported it, and
once the controller has forgotten a job that nobody looked at, reads the replicas' exit records.
Logs are the job directory's files, found by app id from any directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx.specs import AppDef, AppDryRunInfo, AppState, Role, runopts
from torchx.workspace.api import WorkspaceMixin

from torchx_ext.error_file import ErrorReport, read_error_file
from torchx_ext.errors import InvalidArgumentError, JobRecordError
from torchx_ext.schedulers.common.app_ids import FILE_NAME_IDS, new_app_id
from torchx_ext.schedulers.common.files import DIR_MODE, write_atomically
from torchx_ext.schedulers.common.job_dir import submitted_request
from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.schedulers.common.proc import process_start_ticks
from torchx_ext.schedulers.common.role_spec import role_from_spec
from torchx_ext.schedulers.common.scheduler import JobView, ReplicaReport, ReplicaKeys, SchedulerShell, describe_response
from torchx_ext.schedulers.common.states import State, app_state
from torchx_ext.schedulers.common.watch import EndingWindow, RecordWatch, directory_names
from torchx_ext.schedulers.slurm.allocation import DriverFacts, allocation_of, check_fits, driver_environment
from torchx_ext.schedulers.slurm.allocation import job_state as driver_job_state
from torchx_ext.schedulers.slurm.client import (JobStates, allocation_state, cancel_steps, most_gpus_per_node,
                                                read_allocation, sbatch, scancel, signal_steps)
from torchx_ext.stack_request import REQUEST_SIGNAL
from torchx_ext.schedulers.slurm.view import SlurmJob, forgotten_job_state, replica_state
from torchx_ext.schedulers.slurm.options import (SlurmOpts, check_workspace_type, gpu_type_of, partition_of,
                                                 sbatch_options, run_opts, with_whole_nodes)
from torchx_ext.schedulers.slurm.records import JOBS, SlurmJobDir, StepEnd, first_failure as records_first_failure, step_ended
from torchx_ext.schedulers.slurm.build import build_request, describe_request
from torchx_ext.schedulers.slurm.request import requeues
from torchx_ext.schedulers.slurm.warm_step import start_warm_step
from torchx_ext.schedulers.slurm.workspace import copy_workspace, workspace_of
from torchx_ext.schedulers.common.workspace_files import workspace_path

# How often a followed log asks Slurm whether the job still runs.
TAIL_STATE_POLL_S = 2.0
ENDING_CHECK_S = 0.1
"""How often a job whose replicas all ended is read again while Slurm ends it."""


def gpu_requests(app: AppDef, cfg: SlurmOpts, partition: str | None) -> tuple[list[str], bool]:
    """The GRES type to ask each role's GPUs of, and whether every replica asks all the GPUs a node
    of ``partition`` has (then each gets its whole node: no one else's job shares its CPUs, and
    its plan covers them all), as ``sinfo`` tells.

    A named resource's GPU model is asked as the type only where the partition's nodes name it so
    (clusters name theirs as they like: ``h100``, ``nvidia_h100_80gb_hbm3``, or none), a
    ``-cfg gpu_type`` always. A role asking more GPUs than any node has is refused here, in one
    line, before anything is queued; where ``sinfo`` cannot tell, or no node has GPUs of the type
    given, sbatch judges (and says why in one line)."""
    given = cfg.get("gpu_type")
    types: list[str] = []
    whole = bool(app.roles)
    for role in app.roles:
        kind = gpu_type_of(given, role.resource)
        gpus = int(role.resource.gpu or 0)
        if gpus <= 0:
            types.append(kind)
            whole = False
            continue
        most = most_gpus_per_node(partition, kind)
        if kind and not given and most == 0:
            kind, most = "", most_gpus_per_node(partition, "")
        types.append(kind)
        if most is None or (most == 0 and kind):
            whole = False
            continue
        if gpus > most:
            where = f"partition {partition!r}" if partition else "the default partition"
            has = f"more than {most}" if most else "any"
            raise InvalidArgumentError(
                f"role {role.name!r} asks {gpus} GPUs{f' of type {kind}' if kind else ''} per node, but no node of "
                f"{where} has {has}: ask at most {most} per replica (--gpu N, or a named resource that fits) and "
                "more replicas with -j, or another partition")
        whole = whole and gpus == most
    return types, whole


class SlurmScheduler(WorkspaceMixin[None], SchedulerShell[SlurmOpts]):
    def __init__(self, session_name: str) -> None:
        super().__init__("slurm", session_name)
        self._workspaces: dict[int, tuple[Role, Path]] = {}
        """What ``build_workspace_and_update_role`` was told, by ``id(role)`` (the role held with it, so
        that no other object takes its id), until the dry-run reads it."""
        self._states = JobStates()
        self._records = RecordWatch()
        self._ending = EndingWindow()

    def _run_opts(self) -> runopts:
        return run_opts(str(default_job_dirs()))

    def build_workspace_and_update_role(self, role: Role, workspace: str, cfg: Mapping[str, Any]) -> None:
        """Nothing is built: the workspace is copied into the job's directory when it is submitted
        (``workspace.py``), and its steps run there."""
        check_workspace_type(cfg)
        self._workspaces[id(role)] = (role, workspace_path(workspace, "slurm"))

    def caching_build_workspace_and_update_role(self, role: Role, cfg: Mapping[str, Any],
                                                build_cache: dict[object, object]) -> None:
        """torchx-nightly's hook: its default copies a workspace of several directories into a
        temporary one that is gone before the job is submitted, when ours is copied."""
        workspace = getattr(role, "workspace", None)
        if not workspace:
            return
        if not workspace.is_unmapped_single_project():
            raise InvalidArgumentError(f"workspace {str(workspace)!r}: slurm takes one directory, copied into the "
                                       "job's as it is (no DIR:SUBDIR mappings, no several directories)")
        self.build_workspace_and_update_role(role, str(workspace), cfg)

    def _submit_dryrun(self, app: AppDef, cfg: SlurmOpts) -> AppDryRunInfo:
        check_workspace_type(cfg)
        workspace = workspace_of(app.roles, self._workspaces)
        for role in app.roles:
            self._workspaces.pop(id(role), None)
        options = sbatch_options(cfg)  # once: whole nodes add --exclusive to it (with_whole_nodes)
        parent = Path(cfg.get("job_dir") or default_job_dirs()).absolute()
        name = new_app_id(app.name, FILE_NAME_IDS)
        allocation_id = allocation_of(cfg, os.environ)
        allocation = None
        if allocation_id is not None:
            allocation = read_allocation(allocation_id)
            check_fits(app, allocation)
            # Each role's GPUs of whatever type the allocation holds; all of a node's: all its CPUs too.
            gpu_types = [""] * len(app.roles)
            whole_nodes = all(0 < int(role.resource.gpu or 0) == allocation.gpus_per_node for role in app.roles)
            name = f"{allocation_id}-{name}"
        else:
            gpu_types, whole_nodes = gpu_requests(app, cfg, partition_of(options))
            if whole_nodes:
                options = with_whole_nodes(options, cfg)
        exclusive = bool(cfg.get("exclusive")) or whole_nodes
        request = build_request(
            app,
            job_dir=str(parent / name),
            cwd=os.getcwd(),
            interpreter=sys.executable,
            options=options,
            exclusive=exclusive,
            gpu_types=gpu_types,
            workspace=workspace,
            allocation=allocation,
            warm=bool(cfg.get("warm")),
        )
        return AppDryRunInfo(request, describe_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        request = dryrun_info.request
        job = SlurmJobDir(Path(request.job_dir))
        try:
            job.path.mkdir(mode=DIR_MODE, parents=True)
        except OSError as error:
            raise InvalidArgumentError(
                f"cannot write the job's directory {job.path} ({error.strerror or error}): give a directory every "
                "node sees with -cfg job_dir=DIR") from None
        try:
            if request.workspace:
                self._copy_workspace(request, job)
            write_atomically(job.request, request.to_json())
            write_atomically(job.script, request.script)
        except BaseException as error:
            shutil.rmtree(job.path, ignore_errors=True)
            if isinstance(error, OSError):
                raise InvalidArgumentError(
                    f"cannot write the job's directory {job.path} ({error.strerror or error}): give a directory "
                    "every node sees with -cfg job_dir=DIR") from None
            raise
        if request.allocation:
            return self._start_driver(request, job)
        try:
            # The GPUs asked for are named too: a GRES type the cluster lacks is refused only as
            # "Requested node configuration is not available".
            job_id = sbatch(job.script, [*request.options, *request.gpus_asked()])
        except BaseException:
            shutil.rmtree(job.path, ignore_errors=True)
            raise
        JOBS.register(job_id, job.path)
        return job_id

    @staticmethod
    def _start_driver(request: Any, job: SlurmJobDir) -> str:
        """Runs the job's script on this host, detached, as the steps of its allocation: no sbatch,
        no queue. Its end is the script's record (``driver.exit``)."""
        app_id = job.path.name
        ignored = [option.split("=", 1)[0] for option in request.options if option != "--exclusive"]
        warm = ""
        try:
            if request.warm_step:
                # Beside the jobs' directories, as its interpreters' logs: it outlives this job.
                said = start_warm_step(request.warm_step, request.allocation, os.environ,
                                       job.path.parent / f"warm-{request.allocation}-srun.out")
                warm = f"; {said}" if said else ""
            with open(job.driver_output, "ab") as output:
                driver = subprocess.Popen(["bash", str(job.script)], cwd=request.roles[0].cwd, stdin=subprocess.DEVNULL,
                                          stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                                          env=driver_environment(os.environ, request.allocation, app_id))
            write_atomically(job.driver, json.dumps({"host": socket.gethostname(), "pid": driver.pid,
                                                     "ticks": process_start_ticks(driver.pid)}))
        except BaseException:
            shutil.rmtree(job.path, ignore_errors=True)
            raise
        JOBS.register(app_id, job.path)
        print(f"running in allocation {request.allocation} ({request.allocation_nodes} nodes): no sbatch, no queue"
              + (f"; {', '.join(ignored)} ignored (they shape a new job)" if ignored else "") + warm, file=sys.stderr)
        return app_id

    @staticmethod
    def _copy_workspace(request: Any, job: SlurmJobDir) -> None:
        source = Path(request.workspace)
        try:
            copied = copy_workspace(source, job.workspace, job.path.parent)
        except OSError as error:
            if error.filename and not str(error.filename).startswith(str(job.path)):
                raise InvalidArgumentError(f"cannot copy the workspace {source} ({error.strerror or error}: "
                                           f"{error.filename}): exclude it in {source}/.torchxignore, or run in place "
                                           "with --workspace ''") from None
            raise
        if copied.large:
            print(copied.advice(source), file=sys.stderr)

    def describe(self, app_id: str) -> Optional[DescribeAppResponse]:
        job = JOBS.find(app_id)
        if job is None:
            return None
        request = job.read_request()
        slurm = self._job(app_id, job)
        ends = {(role.name, k): job.read_step_end(role.name, k)
                for role in request.roles for k in range(role.num_replicas)}
        first_failure = records_first_failure(ends) if slurm.state is State.FAILED else None
        replicas = []
        error = None
        for (role, k), end in ends.items():
            state = replica_state(slurm.state, job.started(role, k).exists(), end.exit_code if end else None)
            report = None
            if state is State.FAILED and first_failure is not None and (role, k) != first_failure:
                state = State.CANCELLED  # stopped by Slurm because another replica failed
            elif state is State.FAILED and end is not None:
                report = _error_report(job, role, k, end)
                error = error or report
            replicas.append(ReplicaReport(role, k, state, job.started_on(role, k), report))
        msg = slurm.message
        # The batch script's restarts of a role's step, and a hot-spare role's replicas started again in place.
        num_restarts = sum(job.read_restarts(role.name) for role in request.roles) + sum(
            job.read_replica_restarts(role, k) for role, k in ends)
        spares = [(replica.role, replica.replica_id) for replica in replicas
                  if replica.state is State.RUNNING and job.spare(replica.role, replica.replica_id).exists()]
        if first_failure is not None and error is not None:
            role, k = first_failure
            msg = f"replica {role}/{k} ({job.started_on(role, k)}) {error.message}" + (f"; {msg}" if msg else "")
        return describe_response(JobView(
            app_id,
            slurm.state,
            roles=[role_from_spec(role.spec, role.policy) for role in request.roles],
            replicas=replicas,
            error=error,
            num_restarts=num_restarts,
            message=msg,
            last_failure="; ".join(text for role in request.roles if (text := job.read_last_failure(role.name))),
            spares=spares,
            elastic={role.name: role.policy.min_replicas for role in request.roles if role.policy.is_elastic},
            ui_url=f"file://{job.path}",
        ))

    def wait_for_change(self, app_id: str, timeout_s: float) -> bool:
        """Until a record appears in the job's directory (a replica started or ended on its node,
        a cancel). Once every replica that started has ended, only a moment (for up to
        ``ENDING_WINDOW_S``): the controller ends the job when its batch script returns, and tells
        nobody. Nor does it tell when a job leaves the queue: its pending reasons are read again
        by the caller, now and then."""
        job = JOBS.find(app_id)
        if job is None:
            return True
        if self._ending.brief(app_id, _replicas_done(job)):
            time.sleep(min(timeout_s, ENDING_CHECK_S))
            return True
        return self._records.wait(app_id, lambda: directory_names(job.path), timeout_s)

    def describe_native(self, app_id: str) -> Optional[AppDryRunInfo]:
        """The request the job was submitted with (torchx-nightly's read-back of a dry-run)."""
        return submitted_request(JOBS.find(app_id), describe_request)

    def list(self, cfg: Optional[Mapping[str, Any]] = None) -> list[ListAppResponse]:
        """Our jobs (those submitted through this scheduler as this user), with one call to Slurm
        for every job whose end is not known yet."""
        jobs = {app_id: job for app_id in JOBS.app_ids() if (job := JOBS.find(app_id)) is not None}
        ended = {app_id: end for app_id, job in jobs.items() if (end := _kept_end(job)) is not None}
        queued = [app_id for app_id in jobs if app_id not in ended and app_id.isdigit()]
        live = self._states.read(queued, since=min((_submitted_at(job) for job in jobs.values()), default=time.time()))
        listed = []
        for app_id, job in jobs.items():
            slurm = ended.get(app_id) or (self._settle(app_id, job, live.get(app_id)) if app_id in queued
                                          else self._in_allocation(job))
            listed.append(ListAppResponse(app_id=app_id, state=app_state(slurm.state)))
        return listed

    def _replica_lines(self, app_id: str, role_name: str, replica_id: int,
                       query: LogQuery) -> Iterable[tuple[float, str]]:
        job = self.recorded_job(JOBS, app_id)
        request = job.read_request()
        self.check_replica(app_id, role_name, replica_id, [(role.name, k) for role in request.roles
                                                           for k in range(role.num_replicas)])
        from torchx_ext.schedulers.common.log_files import read_timed_lines

        checked = [0.0, False]

        def finished() -> bool:
            if job.exit(role_name, replica_id).exists():
                return True
            if time.monotonic() - checked[0] >= TAIL_STATE_POLL_S:
                checked[0], checked[1] = time.monotonic(), self._job(app_id, job).terminal
            return bool(checked[1])

        return read_timed_lines(job.log(role_name, replica_id, query.stream), should_tail=query.should_tail,
                                finished=finished)

    def ask_for_stacks(self, app_id: str, role_name: str | None = None,
                       replica_id: int | None = None) -> ReplicaKeys:
        job = self.recorded_job(JOBS, app_id)
        described = self.describe(app_id)
        replicas = [] if described is None else [
            (status.role, replica.id, replica.state == AppState.RUNNING)
            for status in described.roles_statuses for replica in status.replicas]
        chosen = self.stack_targets(app_id, replicas, role_name, replica_id)
        # Every process of the job's steps gets it: only launchers act on it (stack_request.py). The
        # logs tell the chosen replicas' answers apart.
        allocation = job.read_request().allocation
        signal_steps(allocation or app_id, REQUEST_SIGNAL.name.removeprefix("SIG"),
                     job.path.name if allocation else None)
        return chosen

    def _cancel_existing(self, app_id: str) -> None:
        job = JOBS.find(app_id)
        if job is None or self._job(app_id, job).terminal:
            return
        # Kept first: whatever the processes exit with as they are stopped, the job is CANCELLED.
        write_atomically(job.cancelled, str(time.time()))
        allocation = job.read_request().allocation
        if not allocation:
            scancel(app_id)
            return
        # The job's own steps only: the allocation and its other steps go on.
        driver = _local_driver(job)
        if driver is not None:
            try:
                os.killpg(driver, signal.SIGTERM)
            except OSError:
                pass
        cancel_steps(allocation, job.path.name)

    def _delete_existing(self, app_id: str) -> None:
        """Cancel the job if it runs, then remove its directory (logs included) and its entry."""
        job = JOBS.find(app_id)
        if job is None:
            return
        self._cancel_existing(app_id)
        shutil.rmtree(job.path, ignore_errors=True)
        JOBS.unregister(app_id)

    def _job(self, app_id: str, job: SlurmJobDir) -> SlurmJob:
        kept = _kept_end(job)
        if kept is not None:
            return kept
        if not app_id.isdigit():
            return self._in_allocation(job)
        found = self._settle(app_id, job, self._states.read([app_id], since=_submitted_at(job)).get(app_id))
        if not found.terminal and _replicas_done(job):
            # The controller ends a job a moment before accounting hears of it.
            queued = self._states.queued(app_id)
            if queued is not None and queued.terminal:
                return self._settle(app_id, job, queued)
        if found.state is State.PENDING and not found.message:
            # Accounting does not say why a job waits; the controller does.
            queued = self._states.queued(app_id)
            if queued is not None and queued.state is State.PENDING:
                return queued
        return found

    def _settle(self, app_id: str, job: SlurmJobDir, reported: SlurmJob | None) -> SlurmJob:
        """The job's view from what Slurm reported (None: Slurm forgot it); an end is kept."""
        cancelled = job.cancelled.exists()
        if reported is None:
            request = job.read_request()
            codes = [end.exit_code if (end := job.read_step_end(role.name, k)) else None
                     for role in request.roles for k in range(role.num_replicas) if job.started(role.name, k).exists()]
            reported = forgotten_job_state(codes, cancelled)
        elif reported.terminal and cancelled and reported.state is not State.CANCELLED:
            reported = SlurmJob(State.CANCELLED, reported.slurm_state, "cancelled by request")
        elif reported.terminal and reported.slurm_state.split(" ")[0] in REQUEUED_AFTER and _requeues(job):
            # Accounting records the run that ended so; the controller may have queued the job again.
            queued = self._states.queued(app_id)
            if queued is not None and not queued.terminal:
                return queued
        if reported.terminal:
            _keep_end(job, reported)
        return reported


    @staticmethod
    def _in_allocation(job: SlurmJobDir) -> SlurmJob:
        """A job in an allocation, from its driver's records and the allocation's state; an end is kept."""
        request = job.read_request()
        # Whether the driver runs, before its end record is read: it writes that record, then exits.
        alive = None if _driver_host(job) != socket.gethostname() else _local_driver(job) is not None
        facts = DriverFacts(
            allocation=request.allocation,
            allocation_state=allocation_state(request.allocation),
            cancelled=job.cancelled.exists(),
            driver_exit=_recorded_code(job.driver_exit),
            driver_alive=alive,
            started=any(job.started(role.name, k).exists() for role in request.roles for k in range(role.num_replicas)),
        )
        state, word, message = driver_job_state(facts)
        found = SlurmJob(state, word, message)
        if found.terminal:
            _keep_end(job, found)
        return found


def create_scheduler(session_name: str, **kwargs: Any) -> SlurmScheduler:
    return SlurmScheduler(session_name)


def default_job_dirs() -> Path:
    return JOBS.state_root() / "runs"


REQUEUED_AFTER = ("NODE_FAIL", "PREEMPTED")


def _replicas_done(job: SlurmJobDir) -> bool:
    """Whether some replica started and every one that did has ended (its exit record)."""
    request = job.read_request()
    started = [(role.name, k) for role in request.roles for k in range(role.num_replicas)
               if job.started(role.name, k).exists()]
    return bool(started) and all(job.exit(role, k).exists() for role, k in started)


def _requeues(job: SlurmJobDir) -> bool:
    """Whether the job was submitted to be requeued (after a node failure or a preemption)."""
    try:
        return requeues(job.read_request())
    except (OSError, ValueError, KeyError, TypeError, JobRecordError):
        return False


def _submitted_at(job: SlurmJobDir) -> float:
    try:
        return job.request.stat().st_mtime
    except OSError:
        return time.time()


def _kept_end(job: SlurmJobDir) -> SlurmJob | None:
    try:
        data = json.loads(job.final.read_text())
        return SlurmJob(State(data["state"]), data["slurm_state"], data["message"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep_end(job: SlurmJobDir, end: SlurmJob) -> None:
    try:
        write_atomically(job.final, json.dumps({"state": end.state.value, "slurm_state": end.slurm_state,
                                                "message": end.message}))
    except OSError:
        pass  # a read-only job directory: Slurm is asked again next time


def _error_report(job: SlurmJobDir, role: str, replica_id: int, end: StepEnd) -> ErrorReport:
    report = read_error_file(job.error_file(role, replica_id))
    message = step_ended(end, report.message if report is not None else "")
    return ErrorReport(message=message, error_code=end.exit_code, timestamp=int(end.at),
                       traceback=report.traceback if report is not None else "")


def _driver_record(job: SlurmJobDir) -> dict[str, Any]:
    try:
        data = json.loads(job.driver.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _driver_host(job: SlurmJobDir) -> str:
    return str(_driver_record(job).get("host", ""))


def _local_driver(job: SlurmJobDir) -> int | None:
    """The pid of the job's driver if it runs on this host still (not a zombie, not another
    process that took its pid)."""
    record = _driver_record(job)
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int):
        return None
    # By its start time, not its command line: that reads empty while the exec is under way.
    ticks = process_start_ticks(pid)
    return pid if ticks is not None and ticks == record.get("ticks") else None


def _recorded_code(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None

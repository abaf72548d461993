"""The process that runs one local_cwd job: ``python -m torchx_ext.schedulers.local.supervisor JOB_DIR``.

It is started in its own session by ``schedule`` and outlives the torchx CLI that submitted
the job, so the job keeps running, and keeps being recorded, when that CLI exits or is
killed. It starts every replica in its own process group with the replica's CPU slice as
affinity, copies their output into the log files, restarts a failed replica up to the role's
``max_retries`` (hosting the rendezvous store in a process of its own when a replica may
restart, so that losing any replica costs only that replica a retry), lets an elastic role
(``min_replicas`` below ``num_replicas``) carry on without replicas that failed for good while
it keeps ``min_replicas``, and ends the job when any other replica fails for good or a cancel
arrives: SIGTERM to every replica's group, SIGKILL after the grace period, then the same for any process still
marked as the job's (torchelastic starts workers in sessions of their own). It is the only
writer of the job's ``state.json``, and writes a terminal state only once nothing of the job
is left running and its logs are complete.
"""

from __future__ import annotations

import ctypes
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from torchx_ext.error_file import read_error_file
from torchx_ext.errors import TorchxExtError
from torchx_ext.exit_codes import STUCK
from torchx_ext.numa.bind import bound_thread
from torchx_ext.liveness import FileWatch, runs_our_launcher
from torchx_ext.replica_env import LAUNCHER_MODULE, LIVENESS_FILE_ENV, RDZV_IS_HOST_ENV, RDZV_PORT_ENV
from torchx_ext.schedulers.common.states import State, how_it_ended, job_move, replica_move
from torchx_ext.schedulers.local.processes import (JOB_MARKER_ENV, marked_processes, signal_process as _signal,
                                                   stop_processes)
from torchx_ext.schedulers.local.records import (ERROR_FILE_NAME, LIVENESS_FILE_NAME, JobState, LocalJobDir, ReplicaState,
                                                 STEPPED_ASIDE, SupervisorRecord)
from torchx_ext.schedulers.local.request import LocalJobRequest, ReplicaRequest, LocalRoleRequest
from torchx_ext.schedulers.common.log_files import ReplicaLogWriter
from torchx_ext.warm import fork
from torchx_ext.warm.fork import ForkedProcess

_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.5
_STORE_START_S = 60
_STDERR_TAIL_LINES = 5
_STDERR_TAIL_BYTES = 1 << 16


@dataclass
class _Replica:
    request: ReplicaRequest
    state: ReplicaState
    role: LocalRoleRequest
    logs: ReplicaLogWriter
    stopped_by_us: bool = False
    lost: bool = False
    """Failed for good in an elastic role that carries on without it."""
    silent_s: float | None = None
    """How long its launcher had given no sign of life when we killed it as frozen."""
    liveness: FileWatch | None = None
    restarting: bool = False
    """Stopped for the whole job's restart (a role's retry_policy APPLICATION): started again with the rest."""

    @property
    def liveness_file(self) -> Path:
        return Path(self.request.log_dir, LIVENESS_FILE_NAME)

    @property
    def max_retries(self) -> int:
        return self.role.policy.max_retries


class Supervisor:
    def __init__(self, job: LocalJobDir) -> None:
        self.job = job
        self.request: LocalJobRequest = job.read_request()
        initial = job.read_state()
        self.state = JobState(self.request.app_id, initial.state, initial.submitted_at, [])
        self.replicas: list[_Replica] = []
        self.by_pid: dict[int, _Replica] = {}
        # Kept alive: a Popen collected while its process runs is polled by subprocess's own
        # cleanup, which would reap the process and take its exit code from us.
        self.processes: dict[int, subprocess.Popen[bytes] | ForkedProcess] = {}
        self.selector = selectors.DefaultSelector()
        self.pipes: dict[int, tuple[_Replica, str]] = {}
        self.ending: State | None = None  # the terminal state being worked towards
        self.kill_at = float("inf")
        self.cancel_requested = False
        self.port = 0
        self.store: subprocess.Popen[bytes] | None = None
        """The rendezvous store's process, where the job may restart a replica."""
        self.user_umask = 0o022
        self.job_restarts = 0
        """Restarts of the whole job (retry_policy APPLICATION)."""
        self.restart_at_kill = float("inf")
        """While the job restarts: when what is still running of it is SIGKILLed."""

    def run(self) -> None:
        _become_subreaper()
        self._watch_signals()
        if self.job.cancel.exists():  # cancelled while it was being submitted: start nothing
            self._end_job(State.CANCELLED, "cancelled before it started")
            self._save()
            return
        try:
            self._supervise()
        except BaseException as error:
            # Whatever broke here, the job must not run on unsupervised.
            _log(f"supervisor failed: {error!r}; stopping the job")
            self._kill_all(signal.SIGKILL)
            stop_processes(lambda: marked_processes(self.request.app_id), 0, self._reap)
            self._end_job(State.FAILED, f"local_cwd's supervisor failed ({error!r}); see {self.job.supervisor_log}")
            raise

    def _supervise(self) -> None:
        self.state.state = job_move(self.state.state, State.RUNNING)
        self.port = self._start_store() if any(_may_restart(role) for role in self.request.roles) else _free_port()
        for role in self.request.roles:
            for request in role.replicas:
                replica = _Replica(request, ReplicaState(request.role, request.replica_id), role,
                                   ReplicaLogWriter(Path(request.log_dir)))
                self.replicas.append(replica)
                self.state.replicas.append(replica.state)
        for replica in self.replicas:
            if self.ending is None:
                self._start(replica)
            else:  # an earlier replica could not start: the job is over
                replica.state.state = replica_move(replica.state.state, State.CANCELLED)
        self._save()
        while self._running() or self.pipes or self._restarting():
            self._wait_for_events()
            self._reap()
            self._kill_frozen()
            if (self.cancel_requested or self.job.cancel.exists()) and self.ending is None:
                self._end(State.CANCELLED, "cancelled by request")
            if self._restarting():
                self._go_on_restarting()
                continue
            if self.ending is None and not self._running():
                succeeded = all(r.state.state is State.SUCCEEDED or r.lost for r in self.replicas)
                self._end(State.SUCCEEDED if succeeded else State.FAILED, "")
            if time.monotonic() >= self.kill_at:
                self._kill_all(signal.SIGKILL)
                self.kill_at = float("inf")
            if not self._running():
                self._stop_store()
                self._finish_leftovers()
        for replica in self.replicas:
            replica.logs.close()
        self._end_job(self.ending or State.FAILED, self.state.msg)

    def _end_job(self, state: State, msg: str) -> None:
        if self.state.state.terminal:
            return  # recorded already (the safety net after a failure at the very end)
        self.state.state = job_move(self.state.state, state)
        self.state.msg, self.state.ended_at = msg, time.time()
        self._save()

    def _start(self, replica: _Replica) -> None:
        request = replica.request
        Path(request.log_dir, ERROR_FILE_NAME).unlink(missing_ok=True)  # a root cause of an earlier attempt
        replica.liveness_file.unlink(missing_ok=True)
        replica.silent_s = None
        replica.liveness = FileWatch(str(replica.liveness_file))
        descriptors: list[int] = []
        try:
            out_read, out_write = os.pipe()
            descriptors += [out_read, out_write]
            err_read, err_write = os.pipe()
            descriptors += [err_read, err_write]
            with bound_thread(request.cpus) if request.cpus is not None else nullcontext():
                # Our store process hosts the rendezvous store, else replica 0 of the first role that
                # runs our launcher (all replicas share one host name, so torch cannot tell).
                host = self.store is None and request.replica_id == 0 and request.role == self._hosting_role
                rendezvous = {RDZV_PORT_ENV: str(self.port), RDZV_IS_HOST_ENV: "1" if host else "0",
                              LIVENESS_FILE_ENV: str(replica.liveness_file)}
                process = _start_process(request.argv, cwd=request.cwd, env={**os.environ, **request.env, **rendezvous},
                                         stdout=out_write, stderr=err_write, umask=self.user_umask)
        except (OSError, ValueError, TorchxExtError) as error:
            for descriptor in descriptors:
                os.close(descriptor)
            replica.state.state, replica.state.exit_code = replica_move(replica.state.state, State.FAILED), None
            replica.state.error = f"could not start {request.argv[0]!r} in {request.cwd}: {error}"
            self._on_failure(replica)
            return
        os.close(out_write)
        os.close(err_write)
        for descriptor, stream in ((out_read, "stdout"), (err_read, "stderr")):
            os.set_blocking(descriptor, False)
            self.selector.register(descriptor, selectors.EVENT_READ)
            self.pipes[descriptor] = (replica, stream)
        replica.state.state = replica_move(replica.state.state, State.RUNNING)
        replica.state.pid, replica.state.exit_code = process.pid, None
        replica.liveness.pid = process.pid  # stopped before it wrote its file: frozen too
        self.by_pid[process.pid] = replica
        self.processes[process.pid] = process

    @property
    def _hosting_role(self) -> str:
        roles = self.request.roles
        ours = [role.name for role in roles if role.replicas and runs_our_launcher(role.replicas[0].argv[0],
                                                                                   role.replicas[0].argv[1:])]
        return (ours or [role.name for role in roles])[0]

    def _start_store(self) -> int:
        """The port of a store process started for the job; else a free port for replica 0's."""
        try:
            store = subprocess.Popen(
                [sys.executable, "-m", "torchx_ext.launcher.rendezvous.store_host"], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, env={**os.environ, JOB_MARKER_ENV: self.request.app_id},
                start_new_session=True)
        except OSError as error:
            _log(f"no store process ({error}): replica 0 hosts the rendezvous store")
            return _free_port()
        assert store.stdout is not None
        # Torch imported and the port bound: a second or two.
        ready, _, _ = select.select([store.stdout], [], [], _STORE_START_S)
        line = store.stdout.readline().strip() if ready else b"nothing in time"
        store.stdout.close()
        if not line.isdigit():
            _log(f"the store process did not start (it said {line!r}): replica 0 hosts the rendezvous store")
            store.kill()
            store.wait()
            return _free_port()
        self.store = store
        self.processes[store.pid] = store
        _log(f"rendezvous store on port {int(line)} (pid {store.pid})")
        return int(line)

    def _stop_store(self) -> None:
        if self.store is not None and self.store.returncode is None:
            _signal(self.store.pid, signal.SIGTERM)
            try:
                self.store.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _signal(self.store.pid, signal.SIGKILL)
        self.store = None

    def _kill_frozen(self) -> None:
        """SIGKILL every replica whose launcher stopped touching its liveness file (a frozen or
        hung replica exits by itself never): its exit is then a lost replica's, within
        max_retries. A replica that is not our launcher writes no file: it is judged only while stopped."""
        for replica in self.replicas:
            if (replica.state.pid not in self.by_pid or replica.silent_s is not None or replica.stopped_by_us
                    or replica.liveness is None):
                continue
            silent = replica.liveness.frozen_for()
            if silent is None:
                continue
            replica.silent_s = silent
            _log(f"{_name(replica)} gave no sign of life for {silent:.1f} s (frozen?): killing it")
            _signal_group(replica.state.pid, signal.SIGKILL)
            for pid in marked_processes(self.request.app_id, _name(replica)):
                _signal(pid, signal.SIGKILL)

    def _wait_for_events(self) -> None:
        for key, _ in self.selector.select(timeout=_POLL_S):
            if key.fd == self.wakeup:
                _drain(self.wakeup)
            else:
                self._pump(key.fd)

    def _pump(self, descriptor: int, drain: bool = False) -> None:
        replica, stream = self.pipes[descriptor]
        try:
            data = os.read(descriptor, 1 << 16)
        except BlockingIOError:
            if drain:  # nothing more will come: done with this pipe
                self.selector.unregister(descriptor)
                os.close(descriptor)
                del self.pipes[descriptor]
            return
        if data:
            replica.logs.write(stream, data)
            return
        self.selector.unregister(descriptor)
        os.close(descriptor)
        del self.pipes[descriptor]

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            replica = self.by_pid.pop(pid, None)
            if pid in self.processes:
                self.processes.pop(pid).returncode = os.waitstatus_to_exitcode(status)
            if replica is not None:  # else an orphaned worker handed to us as subreaper
                self._on_exit(replica, os.waitstatus_to_exitcode(status))

    def _on_exit(self, replica: _Replica, code: int) -> None:
        replica.state.exit_code = code
        if replica.restarting and self.ending is None:
            pass  # stopped for the job's restart: started again with the others
        elif code == 0:
            replica.state.state = replica_move(replica.state.state, State.SUCCEEDED)
        elif replica.stopped_by_us:
            replica.state.state = replica_move(replica.state.state, State.CANCELLED)
        elif code == STUCK and runs_our_launcher(replica.request.argv[0], replica.request.argv[1:]):
            self._failed_for_good(replica, code)  # its attempts kept hanging at one point: no use restarting
        elif replica.role.policy.restarts_app and self.ending is None:
            if self.job_restarts < replica.max_retries:
                self._restart_job(replica, code)
            else:
                self._failed_for_good(replica, code)
        elif replica.state.restarts < replica.max_retries and self.ending is None:
            replica.state.restarts += 1
            _log(f"{_name(replica)} exited with code {code}: restart {replica.state.restarts} of {replica.max_retries}")
            self.state.last_failure = f"replica {_name(replica)} {_how_it_ended(replica, code)}: {_root_cause(replica)}"
            # Workers of the failed attempt may outlive their launcher (they have sessions of
            # their own): they must not compete with the new attempt.
            for pid in marked_processes(self.request.app_id, _name(replica)):
                _signal(pid, signal.SIGKILL)
            self._start(replica)
        else:
            self._failed_for_good(replica, code)
        self._save()

    def _failed_for_good(self, replica: _Replica, code: int) -> None:
        replica.state.state = replica_move(replica.state.state, State.FAILED)
        replica.state.error = _root_cause(replica)
        if self.ending is None and self._carries_on_without(replica):
            replica.lost = True
            _log(f"{_name(replica)} exited with code {code} for good; its elastic role {replica.role.name!r} "
                 f"carries on (it needs {replica.role.needed} replicas)")
            for pid in marked_processes(self.request.app_id, _name(replica)):
                _signal(pid, signal.SIGKILL)
        else:
            self._on_failure(replica)

    def _restart_job(self, failed: _Replica, code: int) -> None:
        """torchx's APPLICATION policy: every replica is stopped, then the whole job starts again."""
        self.job_restarts += 1
        _log(f"{_name(failed)} exited with code {code}: restarting the whole job ({self.job_restarts} of "
             f"{failed.max_retries}), as role {failed.role.name!r}'s retry_policy APPLICATION asks")
        self.state.last_failure = f"replica {_name(failed)} {_how_it_ended(failed, code)}: {_root_cause(failed)}"
        for replica in self.replicas:
            replica.restarting = True
        self._kill_all(signal.SIGTERM)
        self.restart_at_kill = time.monotonic() + self.request.cancel_grace_s

    def _restarting(self) -> bool:
        return self.ending is None and any(replica.restarting for replica in self.replicas)

    def _go_on_restarting(self) -> None:
        """Once nothing of the job runs (SIGKILL after the grace period), its store and every
        replica start again, each replica's restarts counting the job's."""
        if time.monotonic() >= self.restart_at_kill:
            self._kill_all(signal.SIGKILL)  # on every pass: what started meanwhile goes too
        if self._running() or marked_processes(self.request.app_id):
            return
        self._stop_store()
        self.port = self._start_store() if any(_may_restart(role) for role in self.request.roles) else _free_port()
        self.restart_at_kill = float("inf")
        for replica in self.replicas:
            fresh = ReplicaState(replica.request.role, replica.request.replica_id, restarts=replica.state.restarts + 1)
            position = next(index for index, state in enumerate(self.state.replicas) if state is replica.state)
            self.state.replicas[position] = fresh
            replica.state, replica.restarting, replica.silent_s, replica.lost = fresh, False, None, False
        for replica in self.replicas:
            if self.ending is None:
                self._start(replica)
            else:  # one could not start: the job is over
                replica.state.state = replica_move(replica.state.state, State.CANCELLED)
        self._save()

    def _carries_on_without(self, replica: _Replica) -> bool:
        others = [r for r in self.replicas if r.role is replica.role]
        return len(others) > replica.role.needed and sum(r.state.state is not State.FAILED for r in others) >= replica.role.needed

    def _on_failure(self, replica: _Replica) -> None:
        if self.ending is None:
            code = replica.state.exit_code
            how = "could not start" if code is None else _how_it_ended(replica, code)
            self._end(State.FAILED, f"replica {_name(replica)} {how}: {replica.state.error} (logs: {replica.request.log_dir})")

    def _end(self, state: State, msg: str) -> None:
        self.ending, self.state.msg = state, msg
        _log(f"ending the job: {state} {msg}")
        for replica in self.replicas:
            if replica.state.pid in self.by_pid:
                replica.stopped_by_us = True
            elif replica.restarting and not replica.state.state.terminal:
                # Stopped for the job's restart, which will not come now.
                replica.state.state = replica_move(replica.state.state, State.CANCELLED)
            replica.restarting = False
        self._kill_all(signal.SIGTERM)
        self.kill_at = time.monotonic() + self.request.cancel_grace_s

    def _kill_all(self, sig: signal.Signals) -> None:
        groups = set(self.by_pid)
        for pid in groups:
            _signal_group(pid, sig)
        # Only those outside the replicas' groups: a launcher signalled twice gets the second
        # while torchelastic stops its workers, which then logs the signal as a log tailer's error.
        for pid in marked_processes(self.request.app_id):
            if _group_of(pid) not in groups:
                _signal(pid, sig)

    def _finish_leftovers(self) -> None:
        # Every replica has exited; what is still marked as the job's (a worker in its own
        # session, a daemon a script started) is stopped too, and then the pipes they held close.
        if marked_processes(self.request.app_id):
            _log("stopping processes the job left behind")
            stop_processes(lambda: marked_processes(self.request.app_id), self.request.cancel_grace_s, self._reap_and_pump)
        deadline = time.monotonic() + 2.0
        while self.pipes:
            self._pump_ready(timeout=0.05)
            if time.monotonic() > deadline or not marked_processes(self.request.app_id):
                self._pump_ready(timeout=0)
                for descriptor in list(self.pipes):  # nobody of the job can write any more
                    self._close_pipe(descriptor)

    def _reap_and_pump(self) -> None:
        self._reap()
        self._pump_ready(timeout=0)

    def _pump_ready(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout=timeout):
            if key.fd in self.pipes:
                self._pump(key.fd)
            elif key.fd == self.wakeup:
                _drain(self.wakeup)

    def _close_pipe(self, descriptor: int) -> None:
        while descriptor in self.pipes:
            try:
                self._pump(descriptor, drain=True)
            except OSError:
                break
        if descriptor in self.pipes:
            self.selector.unregister(descriptor)
            os.close(descriptor)
            del self.pipes[descriptor]

    def _running(self) -> bool:
        return bool(self.by_pid)

    def _save(self) -> None:
        self.job.write_state(self.state)

    def _watch_signals(self) -> None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self.wakeup = read
        self.selector.register(read, selectors.EVENT_READ)
        signal.set_wakeup_fd(write)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears it

        def on_stop(*_: object) -> None:
            self.cancel_requested = True

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_stop)


def _start_process(argv: list[str], *, cwd: str, env: dict[str, str], stdout: int, stderr: int,
                   umask: int) -> subprocess.Popen[bytes] | ForkedProcess:
    """``argv`` in a session of its own; forked, not started anew, when this supervisor is a fork of
    the warm interpreter and ``argv`` runs our launcher with this interpreter: it finds torch imported."""
    if fork.WARM and argv[:3] == [sys.executable, "-m", LAUNCHER_MODULE]:
        try:
            with open(os.devnull, "rb") as nothing:
                return fork.run_module_in_fork(LAUNCHER_MODULE, argv[3:], cwd=cwd, env=env, umask=umask,
                                               streams=(nothing.fileno(), stdout, stderr))
        except TorchxExtError as error:  # no room for its environment, or threads here
            _log(f"started anew, not forked: {error}")
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                            start_new_session=True, umask=umask)




def _how_it_ended(replica: _Replica, code: int) -> str:
    if replica.silent_s is not None:
        return f"gave no sign of life for {replica.silent_s:.1f} s (frozen or hung) and was killed"
    return how_it_ended(code)


def _root_cause(replica: _Replica) -> str:
    """The launcher's error file if it wrote one, else stderr's last lines."""
    request = replica.request
    if replica.silent_s is not None:
        return f"its launcher stopped touching {replica.liveness_file}"
    report = read_error_file(Path(request.log_dir, ERROR_FILE_NAME))
    if report is not None and report.message:
        return report.message
    try:
        with open(request.log_path("stderr"), "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - _STDERR_TAIL_BYTES))
            lines = file.read().decode(errors="replace").splitlines()
    except OSError:
        return "no error output"
    tail = [line for line in lines if line.strip()][-_STDERR_TAIL_LINES:]
    return " | ".join(tail) or "no error output"


def _may_restart(role: LocalRoleRequest) -> bool:
    """Whether a rendezvous of ``role`` may outlive one of its replicas."""
    return len(role.replicas) > 1 and (role.policy.max_retries > 0 or role.needed < len(role.replicas))


def _free_port() -> int:
    # Chosen as the job starts, not in the dry-run: a port probed at submission could be
    # taken by another job's rendezvous in between.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("localhost", 0))
        return int(probe.getsockname()[1])


def _name(replica: _Replica) -> str:
    return f"{replica.request.role}/{replica.request.replica_id}"


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(descriptor: int) -> None:
    try:
        while os.read(descriptor, 512):
            pass
    except BlockingIOError:
        pass


def _become_subreaper() -> None:
    # Workers whose agent died are re-parented to us instead of init, so we can reap them.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _first_supervisor(job: LocalJobDir) -> bool:
    """Whether this is the job's one supervisor: it holds a lock on the job's directory for life."""
    import fcntl

    descriptor = os.open(job.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return False
    return True  # kept open: released as the process ends


def _leave_the_record_to_the_first(job: LocalJobDir, timeout_s: float = 5.0) -> None:
    """Ends once the record names the supervisor that holds the lock (it writes itself as it
    takes it), not this one: while it named this one, this one's end would read as the job's
    supervisor's, and the job as orphaned."""
    for stop in (signal.SIGTERM, signal.SIGINT):  # a cancel now would end it while still named
        signal.signal(stop, signal.SIG_IGN)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = job.supervisor_record()
        if record is not None and record.pid != os.getpid():
            return
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    # Logs and records it writes are the user's alone; replicas get the user's own umask back.
    user_umask = os.umask(0o077)
    job = LocalJobDir(Path(args[0]))
    if not _first_supervisor(job):
        _log(f"{STEPPED_ASIDE} (a warm start answered late): this one (pid {os.getpid()}) ends")
        _leave_the_record_to_the_first(job)
        return
    job.record_supervisor(SupervisorRecord.of(os.getpid()))
    supervisor = Supervisor(job)
    supervisor.user_umask = user_umask
    supervisor.run()


if __name__ == "__main__":
    main()

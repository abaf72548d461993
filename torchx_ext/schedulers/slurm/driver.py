"""The slurm job's driver: ``batch.sh`` execs it (``python -m torchx_ext.schedulers.slurm.driver
JOB_DIR``) in the batch job, or, for a job in an allocation, on the submitting host. It reads
``request.json``, runs each role's ``srun`` step (no shell: the argv is built in ``driver_core``),
and carries out the roles' retry policies (``driver_core`` decides), keeping what describe reads:
each role's restarts and what failed its last attempt, through the same functions the step program
offers batch scripts of before the driver (``step.py``'s subcommands).

Its exit code is the batch job's: the last role that failed, else 0; 143 when it was told to stop
(SIGTERM: scancel, or cancel of a job in an allocation), after it passed the signal to its steps.

Standard library only: it starts before anything else of the job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from torchx_ext.schedulers.common.files import write_atomically
from torchx_ext.schedulers.slurm.driver_core import (
    DONE, GIVE_UP, StepShape, after_app_attempt, after_step, exit_code, first_failed, is_retried, job_status, reruns,
    srun_argv,
)
from torchx_ext.schedulers.slurm.allocation import ALLOCATION_ENV
from torchx_ext.schedulers.slurm.records import SlurmJobDir
from torchx_ext.schedulers.slurm.request import SlurmJobRequest, SlurmRoleRequest
from torchx_ext.schedulers.slurm.step import (
    enough_succeeded, record_app_requeue, record_app_restart, record_failure, record_requeue,
)

STOPPED = 128 + signal.SIGTERM
POLL_S = 0.2
"""How often a whole-app attempt looks at its steps (one failed: the others are stopped)."""


class Driver:
    """Runs one job's steps, each role's on a thread of its own (an app restarted as a whole: one)."""

    def __init__(self, job: SlurmJobDir, request: SlurmJobRequest, env: Mapping[str, str]) -> None:
        self._job = job
        self._request = request
        self._env = env
        self._lock = threading.RLock()  # the signal handler takes it in the main thread, maybe twice
        self._running: list[subprocess.Popen[bytes]] = []
        self._stopping = False
        self._argv: dict[str, list[str]] = {}

    def run(self) -> int:
        """The job's exit code, once every role's step has ended for good."""
        roles = self._request.roles
        request = self._request
        try:
            self._argv = {role.name: srun_argv(
                StepShape.of(role, position), job_path=str(self._job.path), interpreter=request.interpreter,
                env=self._env, heterogeneous=request.heterogeneous, exclusive=request.exclusive,
                allocation=request.allocation, allocation_cpus_per_node=request.allocation_cpus_per_node)
                for position, role in enumerate(roles)}
        except KeyError as missing:
            print(f"slurm driver: Slurm did not set {missing.args[0]}, which the steps need", file=sys.stderr, flush=True)
            return 1
        budget = self._request.app_restarts
        works = [partial(self._whole_app, budget)] if budget is not None else [partial(self._role, role) for role in roles]
        codes = [0] * len(works)

        def into(index: int, work: Callable[[], int]) -> None:
            codes[index] = 1  # until it says otherwise: a thread that dies is no success
            try:
                codes[index] = work()
            except Exception as error:  # srun missing, a record that cannot be written: this role fails
                print(f"slurm driver: {error}", file=sys.stderr, flush=True)

        threads = [threading.Thread(target=into, args=(index, work), name=f"torchx_ext: steps {index}", daemon=True)
                   for index, work in enumerate(works)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return job_status(codes)

    def stop(self, _signum: int = signal.SIGTERM, _frame: object = None) -> None:
        """Told to stop: no step starts again, and each running one gets SIGTERM (srun then
        cancels its step). Once: a second SIGTERM is ignored while the driver ends."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        raise SystemExit(STOPPED)

    def _role(self, role: SlurmRoleRequest) -> int:
        """The role's step, run again after a failure as its policy says, and after Slurm requeued the job."""
        if not is_retried(role.policy):
            return self._step(role.name)
        attempt = 0
        if self._requeued():
            try:
                attempt = record_requeue(self._job, role.name, role.policy.max_retries)
            except SystemExit as over:
                print(over, file=sys.stderr, flush=True)
                return 1
        while True:
            self._job.rendezvous_port(role.name).unlink(missing_ok=True)  # node rank 0 picks a new store port
            code = self._step(role.name)
            enough = code != 0 and role.policy.carries_on_short and self._enough_succeeded(role.name)
            decided = after_step(code, attempt=attempt, reruns=reruns(role.policy), enough_succeeded=enough,
                                 cancelled=self._job.cancelled.exists())
            if decided == DONE:
                return 0
            if decided == GIVE_UP or self._stopped():
                return code
            _best_effort(lambda: record_failure(self._job, role.name))  # for describe while the rerun runs
            attempt += 1
            _best_effort(lambda: write_atomically(self._job.restarts(role.name), str(attempt)))

    def _whole_app(self, budget: int) -> int:
        """Every role's step started together; the first to fail stops the others and, up to
        ``budget`` times, they all start again, every node resuming from the checkpoint."""
        roles = self._request.roles
        attempt = 0
        if self._requeued():
            try:
                attempt = record_app_requeue(self._job, budget)
            except SystemExit as over:
                print(over, file=sys.stderr, flush=True)
                return 1
        while True:
            self._job.rank0_address.unlink(missing_ok=True)  # the first role's node rank 0 publishes it again
            steps: list[subprocess.Popen[bytes] | None] = []
            try:
                for role in roles:
                    self._job.rendezvous_port(role.name).unlink(missing_ok=True)
                    steps.append(self._start(role.name))
                codes: list[int | None] = [None if step is not None else STOPPED for step in steps]
                enough = [False] * len(roles)
                while (failed := first_failed(codes, enough)) is None and None in codes:
                    time.sleep(POLL_S)
                    for i, step in enumerate(steps):
                        if codes[i] is None and step is not None and step.poll() is not None:
                            codes[i] = code = exit_code(step.returncode)
                            enough[i] = code != 0 and roles[i].policy.carries_on_short and self._enough_succeeded(
                                roles[i].name)
            finally:  # the others stop with the first to fail (or with an error here: none is left behind)
                for step in steps:
                    if step is not None and step.poll() is None:
                        step.send_signal(signal.SIGTERM)
                for step in steps:
                    if step is not None:
                        step.wait()
            if failed is None:
                return 0
            code = codes[failed] or 1
            if after_app_attempt(attempt, budget, self._job.cancelled.exists()) == GIVE_UP or self._stopped():
                return code
            _best_effort(lambda: record_app_restart(self._job, roles[failed].name))
            attempt += 1


    def _step(self, role: str) -> int:
        process = self._start(role)
        return STOPPED if process is None else exit_code(process.wait())

    def _start(self, role: str) -> subprocess.Popen[bytes] | None:
        """The role's step started, unless the driver was told to stop (None)."""
        with self._lock:
            if self._stopping:
                return None
            process = subprocess.Popen(self._argv[role], stdin=subprocess.DEVNULL)
            self._running = [running for running in self._running if running.poll() is None] + [process]
        return process

    def _enough_succeeded(self, role: str) -> bool:
        """Whether enough of a short role's replicas ended with 0; a record that cannot be read says no."""
        try:
            return enough_succeeded(self._job, role)
        except Exception as error:
            print(f"slurm driver: could not read role {role}'s ends: {error}", file=sys.stderr, flush=True)
            return False

    def _stopped(self) -> bool:
        with self._lock:
            return self._stopping

    def _requeued(self) -> bool:
        """Slurm's count of requeues: each is one more restart, within the same max_retries."""
        count = self._env.get("SLURM_RESTART_COUNT", "0").strip()
        return count.isdigit() and int(count) > 0


def _best_effort(record: Callable[[], None]) -> None:
    try:
        record()
    except Exception as error:  # what describe shows is not worth the job
        print(f"slurm driver: could not keep a record: {error}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m torchx_ext.schedulers.slurm.driver JOB_DIR", file=sys.stderr)
        return 2
    job = SlurmJobDir(Path(argv[0]))
    code = 1
    try:
        driver = Driver(job, job.read_request(), os.environ)
        signal.signal(signal.SIGTERM, driver.stop)
        code = driver.run()
    except SystemExit as stopped:
        code = stopped.code if isinstance(stopped.code, int) else 1
        if not isinstance(stopped.code, int):
            print(stopped.code, file=sys.stderr, flush=True)
    except Exception as error:  # request.json unreadable: said, and recorded as the end
        print(f"slurm driver: {error}", file=sys.stderr, flush=True)
    finally:
        if os.environ.get(ALLOCATION_ENV):  # the end, for describe: the driver is no Slurm job accounting remembers
            _best_effort(lambda: write_atomically(job.driver_exit, f"{code}\n"))
    return code


if __name__ == "__main__":
    sys.exit(main())

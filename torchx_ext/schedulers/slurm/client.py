"""Slurm's commands, run as argument lists: sbatch, scancel, the reading of job states and of
an allocation's resources, and the cancelling of one job's steps in an allocation.

Every refusal becomes one line naming what Slurm said; a missing command says how to get it.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from torchx_ext.errors import InvalidArgumentError, TorchxExtError
from torchx_ext.schedulers.slurm.allocation import Allocation, parse_allocation
from torchx_ext.schedulers.slurm.view import SlurmJob, parse_sacct, parse_squeue

TIMEOUT_S = 60
# Between this host's clock and the controller's, and submission and the record's write.
SUBMIT_CLOCK_SLACK_S = 120
ACCOUNTING_DISABLED = "accounting storage is disabled"


class SlurmError(TorchxExtError):
    """A Slurm command could not be run or failed for a reason other than the user's input."""


def run(command: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmError(f"{command[0]} is not on PATH: the slurm scheduler runs Slurm's commands (install Slurm's "
                         "client tools, or run from a login node)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{command[0]} did not answer in {TIMEOUT_S} s: is the Slurm controller up?") from None
    if check and done.returncode != 0:
        raise SlurmError(f"{' '.join(command[:2])} failed: {last_line(done.stderr) or f'exit code {done.returncode}'}")
    return done


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def sbatch(script: Path, options: list[str]) -> str:
    """Queues ``script``; its job id. A refusal (an unknown partition, a node list that does not
    exist, a time limit over the partition's) is an InvalidArgumentError of one line naming
    ``options``, the script's options from ``-cfg``."""
    done = run(["sbatch", "--parsable", str(script)], check=False)
    if done.returncode != 0:
        given = f" with {' '.join(options)}" if options else ""
        raise InvalidArgumentError(f"sbatch refused the job{given}: {last_line(done.stderr) or done.returncode} "
                                   "(check those values; nothing was queued)")
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered {done.stdout.strip()!r}, not a job id")
    return job_id


def most_gpus_per_node(partition: str | None, gpu_type: str) -> int | None:
    """The most GPUs (of ``gpu_type``; any type if empty) one node of ``partition`` (the default
    partition if None) offers, as ``sinfo`` says; None when it cannot tell (no answer, no such
    partition: sbatch judges those)."""
    try:
        done = run(["sinfo", "-h", "-o", "%P|%G", *(["-p", partition] if partition else [])], check=False)
    except SlurmError:
        return None
    if done.returncode != 0:
        return None
    return gpus_in_sinfo(done.stdout, partition, gpu_type)


def gpus_in_sinfo(text: str, partition: str | None, gpu_type: str) -> int | None:
    """``most_gpus_per_node`` from ``sinfo -o '%P|%G'`` lines (``debug*|gpu:h100:8(S:0-1)``, the
    default partition marked ``*``)."""
    most = None
    for line in text.splitlines():
        name, _, gres = line.strip().partition("|")
        if not name or (partition is None and not name.endswith("*")) or (partition and name.rstrip("*") != partition):
            continue
        count = 0
        for kind, count_text in _GPU_GRES.findall(gres):
            if not gpu_type or kind.casefold() == gpu_type.casefold():
                count += int(count_text)
        most = max(most or 0, count)
    return most


_GPU_GRES = re.compile(r"(?:^|,)gpu(?::([^:(,]+))?:(\d+)")


def scancel(job_id: str) -> None:
    done = run(["scancel", job_id], check=False)
    if done.returncode != 0 and "Invalid job id" not in done.stderr and "already completing" not in done.stderr:
        raise SlurmError(f"scancel {job_id} failed: {last_line(done.stderr)}")


class JobStates:
    """Slurm's states of jobs, by the cheapest source that knows them: ``sacct`` (one call for
    many jobs) while accounting is on, else ``squeue`` (jobs the controller still holds)."""

    def __init__(self) -> None:
        self.accounting: bool | None = None
        """None until sacct was tried."""

    def read(self, job_ids: Iterable[str], since: float) -> dict[str, SlurmJob]:
        """The jobs Slurm still knows of among ``job_ids``, all submitted after ``since`` (unix
        time); a job missing from the answer is one Slurm forgot (or never had)."""
        wanted = sorted(set(job_ids), key=int)
        if not wanted:
            return {}
        found: dict[str, SlurmJob] = {}
        if self.accounting is not False:
            # The window keeps out an older job of the same id (ids start again when a cluster's
            # controller loses its state, and the database keeps every job).
            start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - SUBMIT_CLOCK_SLACK_S))
            done = run(["sacct", "-X", "-P", "-n", "-o", "JobID,State", "-S", start, "-j", ",".join(wanted)],
                       check=False)
            if done.returncode == 0:
                self.accounting = True
                found = {job_id: job for job_id, job in parse_sacct(done.stdout).items() if job_id in wanted}
            elif ACCOUNTING_DISABLED in done.stderr.lower():
                self.accounting = False
            else:
                raise SlurmError(f"sacct failed: {last_line(done.stderr)}")
        missing = [job_id for job_id in wanted if job_id not in found]
        if missing:
            # Accounting lags the controller by a moment after submission; squeue does not.
            found.update(self._squeue(missing))
        return found

    def queued(self, job_id: str) -> SlurmJob | None:
        """The job as the controller holds it now (``squeue``); None once it forgot it."""
        return self._squeue([job_id]).get(job_id)

    @staticmethod
    def _squeue(job_ids: list[str]) -> dict[str, SlurmJob]:
        done = run(["squeue", "-h", "--states=all", "-o", "%i|%T|%r", "-j", ",".join(job_ids)], check=False)
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return {}  # every one of them is forgotten
            raise SlurmError(f"squeue failed: {last_line(done.stderr)}")
        return {job_id: job for job_id, job in parse_squeue(done.stdout).items() if job_id in job_ids}


def read_allocation(job_id: str) -> Allocation:
    """What allocation ``job_id`` holds, as the controller says; one line naming it if Slurm does
    not know it."""
    done = run(["scontrol", "-d", "-o", "show", "job", job_id], check=False)
    if done.returncode != 0 or "JobState=" not in done.stdout:
        raise InvalidArgumentError(f"allocation {job_id}: Slurm does not know it ({last_line(done.stderr) or 'no answer'}); "
                                   "give -cfg allocation=JOBID of an allocation you hold (squeue --me), or 'new'")
    return parse_allocation(job_id, done.stdout)


def allocation_state(job_id: str) -> str | None:
    """Slurm's state of allocation ``job_id`` now (None: the controller forgot it)."""
    done = run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"], check=False)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return None
        raise SlurmError(f"squeue failed: {last_line(done.stderr)}")
    return done.stdout.strip().split("\n")[0] or None


def signal_steps(job_id: str, signal_name: str, step_name: str | None = None) -> None:
    """Send ``signal_name`` to every process of job ``job_id``'s steps (of those named ``step_name``
    only, when given), not to its batch script; nothing is stopped unless the signal stops it."""
    steps = [job_id] if step_name is None else [step for step, name in steps_of(job_id) if name == step_name]
    for step in steps:
        done = run(["scancel", f"--signal={signal_name}", step], check=False)
        if done.returncode != 0:
            raise SlurmError(f"scancel --signal={signal_name} {step} failed: {last_line(done.stderr)}")


def cancel_steps(job_id: str, step_name: str) -> None:
    """Cancel the steps named ``step_name`` in allocation ``job_id``, and no other. A step srun
    still waits to create is not listed yet: its task finds the job cancelled and starts nothing."""
    for step, name in steps_of(job_id):
        if name == step_name:
            scancel(step)


def steps_of(job_id: str) -> list[tuple[str, str]]:
    """The steps allocation ``job_id`` runs now: their ids and names."""
    done = run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"], check=False)
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        raise SlurmError(f"squeue failed: {last_line(done.stderr)}")
    return [(step, name) for step, _, name in (line.partition("|") for line in done.stdout.splitlines())]

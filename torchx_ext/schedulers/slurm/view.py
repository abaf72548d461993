"""A slurm job as torchx sees it, read purely from what Slurm and the job directory say.

Slurm's job states (``sacct``, ``squeue``, ``scontrol`` all use these names) map to ours;
every end that exit codes cannot tell has a message: a time limit, memory, a node, preemption.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchx_ext.schedulers.common.states import State

SLURM_STATES: dict[str, State] = {
    "PENDING": State.PENDING,
    "CONFIGURING": State.PENDING,  # nodes booting for the job
    "REQUEUED": State.PENDING,
    "REQUEUE_HOLD": State.PENDING,
    "REQUEUE_FED": State.PENDING,
    "RESV_DEL_HOLD": State.PENDING,
    "RESIZING": State.RUNNING,
    "RUNNING": State.RUNNING,
    "COMPLETING": State.RUNNING,  # ended; its processes are being cleaned up
    "SUSPENDED": State.RUNNING,  # stopped, but holds its nodes and resumes where it was
    "STOPPED": State.RUNNING,
    "SIGNALING": State.RUNNING,
    "STAGE_OUT": State.RUNNING,
    "COMPLETED": State.SUCCEEDED,
    "CANCELLED": State.CANCELLED,
    "FAILED": State.FAILED,
    "TIMEOUT": State.FAILED,
    "NODE_FAIL": State.FAILED,
    "OUT_OF_MEMORY": State.FAILED,
    "PREEMPTED": State.FAILED,
    "BOOT_FAIL": State.FAILED,
    "DEADLINE": State.FAILED,
    "SPECIAL_EXIT": State.FAILED,
    "REVOKED": State.FAILED,
}
ENDS_SAID: dict[str, str] = {
    "TIMEOUT": "the job reached its time limit (Slurm TIMEOUT): give more with -cfg time=...",
    "OUT_OF_MEMORY": "a step ran out of memory (Slurm OUT_OF_MEMORY): ask for more with --memMB",
    "NODE_FAIL": "a node of the job failed (Slurm NODE_FAIL)",
    "PREEMPTED": "the job was preempted (Slurm PREEMPTED)",
    "BOOT_FAIL": "a node of the job failed to boot (Slurm BOOT_FAIL)",
    "DEADLINE": "the job reached its deadline (Slurm DEADLINE)",
    "REVOKED": "the job was revoked (Slurm REVOKED: it runs on another cluster of the federation)",
    "SPECIAL_EXIT": "the job ended with a special exit (Slurm SPECIAL_EXIT)",
}


@dataclass(frozen=True)
class SlurmJob:
    """A job as Slurm reported it."""

    state: State
    slurm_state: str
    """Slurm's own word, e.g. ``CANCELLED by 0``."""
    message: str = ""

    @property
    def terminal(self) -> bool:
        return self.state.terminal


def slurm_job(slurm_state: str, reason: str = "") -> SlurmJob:
    """Our view of a job Slurm reports in ``slurm_state`` (``CANCELLED by 1000`` included);
    ``reason``: why it waits or ended, as squeue tells it."""
    word = slurm_state.split()[0].rstrip("+") if slurm_state.strip() else "PENDING"
    state = SLURM_STATES.get(word)
    if state is None:
        return SlurmJob(State.RUNNING, slurm_state, f"unknown Slurm state {slurm_state!r}, taken as still running")
    if word == "CANCELLED":
        by = slurm_state.partition(" by ")[2]
        return SlurmJob(state, slurm_state, "cancelled" + (f" by uid {by}" if by else ""))
    message = ENDS_SAID.get(word, "")
    if state is State.PENDING and reason and reason not in ("None", "(null)"):
        message = f"pending: {reason}"
    return SlurmJob(state, slurm_state, message)


def combine_components(jobs: list[SlurmJob]) -> SlurmJob:
    """A heterogeneous job from its components' states: running while any runs, else the worst end."""
    running = [job for job in jobs if not job.terminal]
    if running:
        return next((job for job in running if job.state is State.RUNNING), running[0])
    for state in (State.FAILED, State.CANCELLED):
        found = next((job for job in jobs if job.state is state), None)
        if found is not None:
            return found
    return jobs[0]


def parse_sacct(text: str) -> dict[str, SlurmJob]:
    """``sacct -X -P -n -o JobID,State`` -> job id -> its job (components of a heterogeneous
    job, ``123+0``, combined)."""
    components: dict[str, list[SlurmJob]] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 2 or not fields[0]:
            continue
        job_id = fields[0].split("+")[0].split("_")[0]
        components.setdefault(job_id, []).append(slurm_job(fields[1]))
    return {job_id: combine_components(jobs) for job_id, jobs in components.items()}


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """``squeue -h -o %i|%T|%r`` -> job id -> its job (components combined, as sacct)."""
    components: dict[str, list[SlurmJob]] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 2 or not fields[0]:
            continue
        job_id = fields[0].split("+")[0]
        components.setdefault(job_id, []).append(slurm_job(fields[1], fields[2] if len(fields) > 2 else ""))
    return {job_id: combine_components(jobs) for job_id, jobs in components.items()}


def replica_state(job: State, started: bool, exit_code: int | None) -> State | None:
    """A replica's state from its job's and its step's record; None: not reported yet."""
    if exit_code is not None:
        if job is State.CANCELLED:
            return State.CANCELLED
        return State.SUCCEEDED if exit_code == 0 else State.FAILED
    if job.terminal:
        return job if started or job is not State.SUCCEEDED else None
    if job is State.RUNNING and started:
        return State.RUNNING
    return State.PENDING if job in (State.PENDING, State.RUNNING) else None


def forgotten_job_state(exit_codes: list[int | None], cancelled: bool) -> SlurmJob:
    """The end of a job the controller forgot, with accounting off: its replicas' exit records."""
    if cancelled:
        return SlurmJob(State.CANCELLED, "CANCELLED", "cancelled")
    if exit_codes and all(code == 0 for code in exit_codes):
        return SlurmJob(State.SUCCEEDED, "COMPLETED")
    missing = sum(code is None for code in exit_codes)
    if missing:
        return SlurmJob(State.FAILED, "UNKNOWN", f"the controller forgot the job and {missing} replica(s) left no exit "
                        "record (their node or step was lost)")
    return SlurmJob(State.FAILED, "FAILED")

"""Jobs inside an allocation the user already holds (``salloc``, a batch job's script, or
``-cfg allocation=JOBID``): the job's roles run as steps of that allocation, started by a
driver on the submitting host instead of ``sbatch``, so nothing waits in the queue.

Pure: which allocation a submission means, what the allocation holds (from ``scontrol -d -o
show job``), whether the app fits, the driver's environment, and the job's state from its
records. ``client.read_allocation`` asks Slurm; ``scheduler.py`` starts and tracks the driver.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.states import State

if TYPE_CHECKING:  # the step program imports this module on every node: no torchx at import
    from torchx.specs import AppDef

NEW_JOB = "new"
"""``-cfg allocation=new``: a job of its own (``sbatch``), even from inside an allocation."""
APP_ID_ENV = "TORCHX_EXT_SLURM_APP_ID"
"""The app id, for the step program of a job in an allocation (whose ``SLURM_JOB_ID`` is the allocation's)."""
ALLOCATION_ENV = "TORCHX_EXT_SLURM_ALLOCATION"
ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                   "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
"""Slurm's states of an allocation that will run no step again."""
_JOB_ID = re.compile(r"\d+")
_NODE_DETAIL = re.compile(r"\bNodes=(\S+) CPU_IDs=(\S+) Mem=(\d+) GRES=(\S*)")


@dataclass(frozen=True)
class Allocation:
    job_id: str
    state: str
    """Slurm's state of the allocation: RUNNING while its steps may start."""
    nodes: int
    cpus_per_node: int
    """The fewest CPUs the allocation holds on one of its nodes."""
    gpus_per_node: int
    """The fewest GPUs (GRES gpu, any type) it holds on one of its nodes."""
    mem_per_node_mb: int
    """The least memory it holds on one of its nodes (0: not tracked)."""


def allocation_of(cfg: Mapping[str, object], environ: Mapping[str, str]) -> str | None:
    """The allocation a submission runs in: ``-cfg allocation``, else the one whose shell (or batch
    script) runs the CLI (``SLURM_JOB_ID``); None for a job of its own."""
    given = cfg.get("allocation")
    if given in (None, ""):
        given = environ.get("SLURM_JOB_ID", "")
        return given if _JOB_ID.fullmatch(given) else None
    text = str(given).strip()
    if text == NEW_JOB:
        return None
    if not _JOB_ID.fullmatch(text):
        raise InvalidArgumentError(f"invalid allocation {given!r}: expected the job id of a Slurm allocation you hold "
                                   f"(digits, e.g. 1234, as salloc says), or {NEW_JOB!r} for a job of its own")
    return text


def parse_allocation(job_id: str, shown: str) -> Allocation:
    """The allocation ``scontrol -d -o show job JOBID`` printed (one line)."""
    fields = dict(re.findall(r"\b(JobState|NumNodes)=(\S+)", shown))
    details = _NODE_DETAIL.findall(shown)
    cpus = [_count_ids(ids) for _, ids, _, _ in details]
    mems = [int(mem) for _, _, mem, _ in details]
    gpus = [sum(int(count) for count in re.findall(r"gpu(?::[^:(,]+)?:(\d+)", gres)) for _, _, _, gres in details]
    return Allocation(job_id=job_id, state=fields.get("JobState", "UNKNOWN"),
                      nodes=int(fields.get("NumNodes", "0").split("-")[0] or 0),
                      cpus_per_node=min(cpus, default=0), gpus_per_node=min(gpus, default=0),
                      mem_per_node_mb=min(mems, default=0))


def _count_ids(ids: str) -> int:
    count = 0
    for part in ids.split(","):
        low, _, high = part.partition("-")
        count += int(high) - int(low) + 1 if high else 1
    return count


def check_fits(app: AppDef, allocation: Allocation) -> None:
    """Refuse, in one line, an app that asks more than the allocation holds: each replica its own
    node, its CPUs, memory and GPUs on that node. Nothing has been started."""
    if allocation.state != "RUNNING":
        raise InvalidArgumentError(f"allocation {allocation.job_id} is {allocation.state}, not RUNNING: its steps "
                                   f"cannot start (-cfg allocation=JOBID of a running one, or {NEW_JOB!r})")
    asked = []
    nodes = sum(role.num_replicas for role in app.roles)
    if nodes > allocation.nodes:
        asked.append(f"{nodes} nodes")
    for role in app.roles:
        resource = role.resource
        if int(resource.cpu) > allocation.cpus_per_node:
            asked.append(f"{int(resource.cpu)} CPUs per node ({role.name})")
        if int(resource.gpu or 0) > allocation.gpus_per_node:
            asked.append(f"{int(resource.gpu)} GPUs per node ({role.name})")
        if allocation.mem_per_node_mb and int(resource.memMB or 0) > allocation.mem_per_node_mb:
            asked.append(f"{int(resource.memMB)} MB per node ({role.name})")
    if asked:
        raise InvalidArgumentError(
            f"the job asks {', '.join(asked)}, but allocation {allocation.job_id} holds {describe(allocation)}: "
            f"ask less (-j, -h), or run it in a larger allocation or as a job of its own (-cfg allocation={NEW_JOB}); "
            "nothing was started")


def describe(allocation: Allocation) -> str:
    gpus = f", {allocation.gpus_per_node} GPUs" if allocation.gpus_per_node else ""
    mem = f", {allocation.mem_per_node_mb} MB" if allocation.mem_per_node_mb else ""
    return f"{allocation.nodes} nodes of {allocation.cpus_per_node} CPUs{gpus}{mem}"


def driver_environment(environ: Mapping[str, str], allocation: str, app_id: str) -> dict[str, str]:
    """The driver's environment: the submitter's, without the allocation shell's ``SLURM_*``
    (``outside_allocation``); and the allocation and app id, for its step programs."""
    env = outside_allocation(environ)
    env[ALLOCATION_ENV] = allocation
    env[APP_ID_ENV] = app_id
    return env


def outside_allocation(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without an allocation shell's ``SLURM_*`` (srun would read them as its own
    options: the shell's task count, CPUs, memory), so that each step srun starts is shaped by its
    own options alone; ``SLURM_CONF`` stays."""
    return {key: value for key, value in environ.items()
            if not key.startswith(("SLURM_", "SRUN_", "SALLOC_", "SBATCH_")) or key == "SLURM_CONF"}


@dataclass(frozen=True)
class DriverFacts:
    """What is known of a job in an allocation, from its records and Slurm."""

    allocation: str
    allocation_state: str | None
    """Slurm's state of the allocation (None: Slurm no longer knows it)."""
    cancelled: bool
    driver_exit: int | None
    """The driver's exit code, once it recorded one."""
    driver_alive: bool | None
    """None: it runs on another host, where this one cannot look."""
    started: bool
    """Some replica started."""


def job_state(facts: DriverFacts) -> tuple[State, str, str]:
    """The job's state, the word Slurm's view gives it, and why."""
    allocation = f"allocation {facts.allocation}"
    gone = facts.allocation_state is None or facts.allocation_state in ENDED
    why = f"{allocation} ended ({facts.allocation_state or 'gone'}) under the job"
    if facts.cancelled:
        return State.CANCELLED, "CANCELLED", "cancelled by request"
    if facts.driver_exit == 0:
        return State.SUCCEEDED, "COMPLETED", ""
    if facts.allocation_state == "COMPLETING":  # how it ended (TIMEOUT, CANCELLED) is said a moment later
        return State.RUNNING, "RUNNING", f"{allocation} is ending"
    if facts.driver_exit is not None:
        return State.FAILED, "FAILED", why if gone else ""
    if gone:
        return State.FAILED, "FAILED", why
    if facts.driver_alive is False:
        return State.FAILED, "FAILED", "the job's driver on the submitting host ended without a record (killed?)"
    if facts.allocation_state != "RUNNING":  # suspended (preempted so), and back later
        return State.RUNNING, "RUNNING", f"{allocation} is {facts.allocation_state}"
    if not facts.started:
        return State.PENDING, "PENDING", f"starting its steps in {allocation} (srun waits while other steps hold its nodes)"
    return State.RUNNING, "RUNNING", ""

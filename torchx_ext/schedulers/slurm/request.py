"""slurm's request: what a job runs, as ``build.py`` makes it from an AppDef and writes it to
``request.json``, which the driver (``driver.py``) and each node's step program (``step.py``) read
back. Formats 1 and 2 are read too: a job queued or requeued across an upgrade still runs.

Standard library only: the step program imports this module on every node.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from torchx_ext.errors import JobRecordError
from torchx_ext.schedulers.common.role_policy import RolePolicy, format_1_role

REQUEST_FORMAT = 3
"""Format 3: what the driver (``driver.py``) needs to run the steps (each role's step shape, the
interpreter, the app's restarts); 2: each role's policy kept once (``policy``). Requests of formats
1 and 2 are read too: their batch scripts run their own retry loops (``step.py``'s subcommands)."""


@dataclass(frozen=True)
class SlurmRoleRequest:
    name: str
    policy: RolePolicy
    """What a failure restarts, and how many nodes the role needs (``common/role_policy.py``)."""
    entrypoint: str
    """Resolved on the submitting host: ``python`` is the submitter's interpreter."""
    args: list[str]
    """As the role gave them: macros are applied by the step program, where their values are known."""
    env: dict[str, str]
    cwd: str
    spec: dict[str, Any]
    """The role as submitted, for describe."""
    cpus_per_task: int = 1
    """Its step's CPUs per node (a whole node's in an ``exclusive`` job: the driver asks Slurm then)."""
    resources: list[str] = field(default_factory=list)
    """Its step's ``--mem`` and ``--gpus-per-node``, as ``srun`` and ``sbatch`` take them."""

    @property
    def num_replicas(self) -> int:
        return self.policy.num_replicas


@dataclass(frozen=True)
class SlurmJobRequest:
    app_name: str
    job_dir: str
    roles: list[SlurmRoleRequest]
    script: str
    """The batch script."""
    options: list[str] = field(default_factory=list)
    """The ``#SBATCH`` options from ``-cfg`` (named when sbatch refuses the job)."""
    workspace: str = ""
    """The workspace copied into the job's ``workspace/`` at submission, where its steps run ("": none;
    they run in the submit directory)."""
    allocation: str = ""
    """The allocation whose steps the job runs as, started by a driver on the submitting host
    ("": a job of its own, queued by sbatch)."""
    allocation_nodes: int = 0
    """How many nodes that allocation held at submission."""
    allocation_gpus_per_node: int = 0
    """The fewest GPUs it holds on one of its nodes."""
    warm_step: list[str] = field(default_factory=list)
    """In an allocation with ``-cfg warm=true``: the srun of the allocation's warm interpreters,
    which fork the replicas' launchers (``warm_step.py``); empty: launchers start anew."""
    allocation_cpus_per_node: int = 0
    """The fewest CPUs the allocation holds on one of its nodes (an ``exclusive`` job's steps take them)."""
    interpreter: str = ""
    """The submitter's Python, which runs the driver and each node's step program."""
    exclusive: bool = False
    """Whole nodes: each step takes every CPU Slurm gave the job on a node."""
    app_restarts: int | None = None
    """How many times an app of several roles starts again as a whole (torchx's APPLICATION);
    None: each role's step runs again alone, if at all (``driver_core.whole_app_restarts``)."""

    @property
    def heterogeneous(self) -> bool:
        """A job of several roles queued by sbatch: one component per role, one step each."""
        return len(self.roles) > 1 and not self.allocation

    def gpus_asked(self) -> list[str]:
        """Each role's ``--gpus-per-node``, for sbatch's command line (a GRES type the cluster
        lacks is refused only as "Requested node configuration is not available" otherwise)."""
        return [option for role in self.roles for option in role.resources if option.startswith("--gpus-")]

    def to_json(self) -> str:
        return json.dumps({"format": REQUEST_FORMAT, **asdict(self)}, indent=1)

    @staticmethod
    def from_json(text: str) -> "SlurmJobRequest":
        data = json.loads(text)
        version = data.pop("format", None)
        if version not in (1, 2, REQUEST_FORMAT):
            raise JobRecordError(f"not a slurm job request of format 1, 2 or {REQUEST_FORMAT}")
        # A format 1 or 2 request: a job queued (or requeued) across an upgrade still runs.
        roles = [SlurmRoleRequest(**{**role, "policy": RolePolicy(**role["policy"])}) if version != 1
                 else SlurmRoleRequest(**format_1_role(role)) for role in data.pop("roles")]
        return SlurmJobRequest(roles=roles, **data)

    def role(self, name: str) -> SlurmRoleRequest | None:
        return next((role for role in self.roles if role.name == name), None)


def requeues(request: SlurmJobRequest) -> bool:
    """Whether the job was submitted to be requeued (after a node failure or a preemption): ours,
    unless the user's sbatch_args, which come after it, said otherwise."""
    said = [requeue_option(request.roles), *(option for option in request.options if option in REQUEUE_OPTIONS)]
    return said[-1] == "--requeue"


REQUEUE_OPTIONS = ("--requeue", "--no-requeue")


def requeue_option(roles: list[SlurmRoleRequest]) -> str:
    """Slurm requeues a batch job whose node failed (went DOWN: cut off, powered off) when the
    cluster's JobRequeue allows (its default): the job starts again on other nodes. A job whose
    every role has restarts left lets it, whatever the cluster's default; otherwise it fails."""
    return "--requeue" if all(role.policy.max_retries > 0 for role in roles) else "--no-requeue"

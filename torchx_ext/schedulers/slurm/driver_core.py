"""The slurm driver's decisions, apart from its processes and files: each role's step as ``srun``
runs it, and what to do when a step ends (run it again, give up, or call it done).

torchx's retry policies, as a Slurm job carries them out:

- a role whose replicas restart in place (REPLICA, HOT_SPARE) runs its step once; each node's step
  program starts its replica again (``step.py``). The step runs again only after Slurm requeued the
  job (a node failure), within the same ``max_retries``;
- a fixed role of APPLICATION or ROLE runs its step again from the start, up to ``max_retries``
  times (one role: the app and the role are the same);
- an app of several roles of which a fixed one asks APPLICATION starts again as a whole, every
  role's step together, the least ``max_retries`` of those roles (as torchx's JobSet and Volcano);
- a role that carries on short (elastic, or with spares) has succeeded when enough of its replicas
  ended with 0, whatever the others did.

Standard library only: the driver runs in the batch job, before anything else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.slurm.request import SlurmRoleRequest

STEP_MODULE = "torchx_ext.schedulers.slurm.step"
DONE, RERUN, GIVE_UP = "done", "rerun", "give up"


def reruns(policy: RolePolicy) -> int:
    """How many times a role's own step runs again after it failed (not counting Slurm's requeues)."""
    return 0 if policy.restarts_in_place else policy.max_retries


def is_retried(policy: RolePolicy) -> bool:
    """Whether the role's step is watched for a rerun or a requeue at all: a fixed role without
    retries runs once, and its first failure is the job's."""
    return policy.max_retries > 0 or policy.carries_on_short


def after_step(code: int, *, attempt: int, reruns: int, enough_succeeded: bool, cancelled: bool) -> str:
    """What follows a role's step that ended with ``code``, on its ``attempt`` (0: the first run):
    DONE (it succeeded, or enough of a short role's replicas did), RERUN, or GIVE_UP (the step's
    code is then the role's). ``enough_succeeded`` only for a role that carries on short."""
    if code == 0 or enough_succeeded:
        return DONE
    if attempt >= reruns or cancelled:
        return GIVE_UP
    return RERUN


def whole_app_restarts(policies: Sequence[RolePolicy]) -> int | None:
    """How many times an app of several roles starts again as a whole: the least ``max_retries`` of
    its fixed APPLICATION roles, as a JobSet's ``maxRestarts`` (None: no role asks for it, and each
    role's step runs again alone, if at all)."""
    whole = [policy.max_retries for policy in policies if policy.restarts_app and not policy.carries_on_short]
    return min(whole) if len(policies) > 1 and whole and max(whole) > 0 else None


def first_failed(codes: Sequence[int | None], enough_succeeded: Sequence[bool]) -> int | None:
    """The first role whose step failed the app (None: none yet); ``codes[i]`` None while role i's
    step runs; ``enough_succeeded[i]``: a short role whose step ended with enough replicas done."""
    return next((i for i, code in enumerate(codes) if code not in (None, 0) and not enough_succeeded[i]), None)


def after_app_attempt(attempt: int, budget: int, cancelled: bool) -> str:
    """What follows an attempt of the whole app that a role failed: RERUN or GIVE_UP."""
    return GIVE_UP if attempt >= budget or cancelled else RERUN


def job_status(codes: Sequence[int]) -> int:
    """The batch job's exit code from its roles' (in order): the last that failed, else 0."""
    return next((code for code in reversed(codes) if code != 0), 0)


def exit_code(returncode: int) -> int:
    """A process's end as a shell gives it: 128 + N for a death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class StepShape:
    """What a role's step asks of Slurm, from the request: the rest comes from the job's environment."""

    position: int
    """The role's place in the app: its heterogeneous component."""
    role: str
    replicas: int
    cpus_per_task: int
    resources: Sequence[str]
    carries_on_short: bool

    @staticmethod
    def of(role: SlurmRoleRequest, position: int) -> StepShape:
        return StepShape(position, role.name, role.num_replicas, role.cpus_per_task, tuple(role.resources),
                         role.policy.carries_on_short)


def srun_argv(shape: StepShape, *, job_path: str, interpreter: str, env: Mapping[str, str], heterogeneous: bool,
              exclusive: bool, allocation: str = "", allocation_cpus_per_node: int = 0) -> list[str]:
    """The role's step: one task per node, each running the step program. ``env``: the batch job's
    (its node count, and a whole node's CPUs for ``exclusive``); ``allocation``: the job runs as
    steps of that allocation, which may hold more nodes than the role asks, and other jobs' steps:
    the replicas are counted, and the steps named for the job, which cancel finds them by.
    KeyError when Slurm did not set a variable the step needs."""
    group = f"_HET_GROUP_{shape.position}" if heterogeneous else ""
    nodes = env[f"SLURM_JOB_NUM_NODES{group}"] if not allocation else str(shape.replicas)
    cpus = str(shape.cpus_per_task)
    if exclusive:
        cpus = str(allocation_cpus_per_node) if allocation else env[f"SLURM_CPUS_ON_NODE{group}"]
    in_allocation = [f"--jobid={allocation}", f"--job-name={job_path.rstrip('/').rsplit('/', 1)[-1]}"] if allocation else []
    prefix = f"{output_pattern(job_path)}/{output_pattern(shape.role)}"
    return ["srun", *in_allocation, f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            f"--cpus-per-task={cpus}", *([f"--het-group={shape.position}"] if heterogeneous else []),
            *shape.resources,
            # A fixed role's step ends with its first failed task (the others could not go on); the
            # survivors of a role that carries on short (elastic, or with spares) go on without it.
            f"--kill-on-bad-exit={0 if shape.carries_on_short else 1}", "--open-mode=append",
            f"--output={prefix}-%t.out", f"--error={prefix}-%t.err",
            interpreter, "-m", STEP_MODULE, job_path, shape.role]


def output_pattern(text: str) -> str:
    """``text`` as a literal in an ``--output`` of srun or sbatch, which read % as a pattern."""
    return text.replace("%", "%%")

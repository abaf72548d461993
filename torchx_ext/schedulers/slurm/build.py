"""What slurm submits, built purely from an AppDef: one batch script and the request its steps read.

A single-role app is a plain job of ``--nodes=N`` (``MIN-MAX`` when elastic), a multi-role app
a heterogeneous job with one component per role. Each role is one ``srun`` step of one task
per node, told its CPUs, memory and GPUs again (``srun`` of Slurm 22.05 no longer inherits
``--cpus-per-task`` from ``sbatch``), whose task runs ``python -m torchx_ext.schedulers.slurm.step``:
that program reads the role's command and environment from ``request.json``, so no argument
or env value of the user's ever passes through a shell. The only values in the script are
Slurm options, checked to be single lines, and paths, quoted. The script then execs the driver
(``driver.py``), which runs each role's step and starts it again as the role's retry policy says.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.role_policy import check_replica_counts, policy_of
from torchx_ext.schedulers.common.role_spec import role_spec
from torchx_ext.schedulers.slurm.allocation import Allocation
from torchx_ext.schedulers.slurm.driver_core import STEP_MODULE, StepShape, output_pattern, srun_argv, whole_app_restarts
from torchx_ext.schedulers.slurm.options import gpu_type_of
from torchx_ext.schedulers.slurm.records import SlurmJobDir
from torchx_ext.schedulers.slurm.request import SlurmJobRequest, SlurmRoleRequest, requeue_option
from torchx_ext.schedulers.slurm.warm_step import warm_step_command

DRIVER_MODULE = "torchx_ext.schedulers.slurm.driver"
_ROLE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_JOB_NAME_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")


def build_request(
    app: specs.AppDef,
    *,
    job_dir: str,
    cwd: str,
    interpreter: str,
    options: list[str],
    exclusive: bool = False,
    gpu_types: list[str] | None = None,
    workspace: str = "",
    allocation: Allocation | None = None,
    warm: bool = False,
) -> SlurmJobRequest:
    """The request for ``app``; ``options``: the checked ``#SBATCH`` options of its ``-cfg``;
    ``gpu_types``: the GRES type to ask each role's GPUs of ("": any; None: as each role's named
    resource says); ``workspace``: a directory copied into the job's at submission, whose copy
    is where the steps run (``cwd`` is then ignored); ``allocation``: the allocation whose steps
    the job runs as (its script is then the driver's, run on the submitting host: no ``sbatch``),
    whose warm interpreters fork the replicas' launchers with ``warm``."""
    if workspace:
        cwd = str(SlurmJobDir(Path(job_dir)).workspace)
    for path, what in ((job_dir, "job_dir"), (cwd, "the current directory")):
        if "\n" in path or "\r" in path:
            raise InvalidArgumentError(f"{what} {path!r} holds a line break, which an #SBATCH line cannot: use another")
    if gpu_types is None:
        gpu_types = [gpu_type_of(None, role.resource) for role in app.roles]
    roles = [_role_request(role, cwd, interpreter, gpu_type) for role, gpu_type in zip(app.roles, gpu_types)]
    job_name = _JOB_NAME_INVALID.sub("-", app.name).strip("-") or "torchx"
    script = batch_script(job_name, SlurmJobDir(Path(job_dir)), cwd, roles, options, interpreter, allocation)
    return SlurmJobRequest(app_name=app.name, job_dir=job_dir, roles=roles, script=script,
                           options=options, workspace=workspace, allocation=allocation.job_id if allocation else "",
                           allocation_nodes=allocation.nodes if allocation else 0,
                           allocation_gpus_per_node=allocation.gpus_per_node if allocation else 0,
                           warm_step=warm_step_command(allocation, interpreter, Path(job_dir).parent)
                           if allocation and warm else [],
                           allocation_cpus_per_node=allocation.cpus_per_node if allocation else 0,
                           interpreter=interpreter, exclusive=exclusive,
                           app_restarts=whole_app_restarts([role.policy for role in roles]))


def batch_script(job_name: str, job: SlurmJobDir, cwd: str, roles: list[SlurmRoleRequest], options: list[str],
                 interpreter: str, allocation: Allocation | None = None) -> str:
    """The script sbatch queues (or, in an allocation, the driver's host runs): Slurm's options, then
    the driver, which runs the steps and their retries from ``request.json``."""
    lines = [
        "#!/bin/bash",
        "# Written by torchx_ext's slurm scheduler: the driver runs one srun step per role and their",
        f"# retries ({DRIVER_MODULE}); each node's task runs {STEP_MODULE}; both read request.json here.",
    ]
    if allocation is None:
        lines += [
            f"#SBATCH --job-name={job_name}",
            f"#SBATCH --chdir={cwd}",
            f"#SBATCH --output={output_pattern(str(job.path))}/slurm-%j.out",
            "#SBATCH --open-mode=append",
        ]
        for position, role in enumerate(roles):
            if position:
                lines.append("#SBATCH hetjob")
            if not position:
                lines.append(f"#SBATCH {requeue_option(roles)}")
            lines += [f"#SBATCH {option}" for option in _shape(role)]
            lines += [f"#SBATCH {option}" for option in options]
    else:
        lines.append(f"# Run on the submitting host, as steps of allocation {allocation.job_id} (no sbatch).")
    lines.append(f"exec {shlex.join([interpreter, '-m', DRIVER_MODULE, str(job.path)])}")
    return "\n".join([*lines, ""])


def describe_request(request: SlurmJobRequest) -> str:
    """The dry-run text: where the job lives, then the batch script as sbatch gets it."""
    lines = [f"job_dir: {request.job_dir}"]
    if request.workspace:
        lines.append(f"workspace: {request.workspace}, copied into {SlurmJobDir(Path(request.job_dir)).workspace} at "
                     "submission (without what .torchxignore excludes); the steps run in the copy")
    for position, role in enumerate(request.roles):
        lines.append(f"{role.name}: {role.policy.min_replicas}..{role.num_replicas} nodes, cwd={role.cwd}")
        lines.append(f"  argv: {[role.entrypoint, *role.args]!r}")
        lines += [f"  env {key}={value!r}" for key, value in sorted(role.env.items())]
        step = srun_argv(StepShape.of(role, position), job_path=request.job_dir, interpreter=request.interpreter,
                         env=_SlurmSets(), heterogeneous=request.heterogeneous, exclusive=request.exclusive,
                         allocation=request.allocation, allocation_cpus_per_node=request.allocation_cpus_per_node)
        lines.append(f"  step (the driver runs it, an argv; Slurm's values named): {' '.join(step)}")
    if request.warm_step:
        lines.append(f"warm: the launchers forked by the allocation's warm interpreters, the step (unless one runs): "
                     f"{' '.join(word for word in request.warm_step if word.strip())}")
    return "\n".join(lines) + "\n--- batch.sh\n" + request.script


class _SlurmSets(dict[str, str]):
    """The batch job's environment as the dry-run can say it: each variable by its name."""

    def __missing__(self, key: str) -> str:
        return f"${{{key}}}"


def _shape(role: SlurmRoleRequest) -> list[str]:
    # Hot spares need nodes of their own from the start: a HOT_SPARE role's MIN is its quorum, not an allocation.
    nodes = f"{role.policy.min_replicas}-{role.num_replicas}" if role.policy.is_elastic else str(role.num_replicas)
    # No --ntasks-per-node here: with it Slurm 22.05 gives a MIN-MAX job MIN nodes even when MAX
    # are idle (measured on the test cluster); the step asks for one task per node itself.
    return [f"--nodes={nodes}", f"--cpus-per-task={role.cpus_per_task}", *role.resources]


def _resources(resource: specs.Resource, gpu_type: str) -> list[str]:
    options = []
    if resource.memMB and resource.memMB > 0:
        options.append(f"--mem={int(resource.memMB)}M")
    if resource.gpu and resource.gpu > 0:
        # Per node, not per task: every rank of a node sees all of the node's GPUs (NVLink peers
        # included), and the launcher gives local rank r the r-th of CUDA_VISIBLE_DEVICES.
        options.append(f"--gpus-per-node={gpu_type + ':' if gpu_type else ''}{int(resource.gpu)}")
    return options


def _role_request(role: specs.Role, cwd: str, interpreter: str, gpu_type: str) -> SlurmRoleRequest:
    if not _ROLE_NAME.fullmatch(role.name):
        raise InvalidArgumentError(
            f"role name {role.name!r} names the job's log files: use letters, digits, '_', '.' and '-'")
    check_replica_counts(role)
    return SlurmRoleRequest(
        name=role.name,
        policy=policy_of(role),
        entrypoint=interpreter if role.entrypoint == "python" else role.entrypoint,
        args=list(role.args),
        env=dict(role.env),
        cwd=cwd,
        spec=role_spec(role),
        cpus_per_task=max(1, int(role.resource.cpu)),
        resources=_resources(role.resource, gpu_type),
    )

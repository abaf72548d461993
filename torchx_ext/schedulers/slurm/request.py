"""What slurm submits, built purely from an AppDef: one batch script and the request its steps read.

A single-role app is a plain job of ``--nodes=N`` (``MIN-MAX`` when elastic), a multi-role app
a heterogeneous job with one component per role. Each role is one ``srun`` step of one task
per node, told its CPUs, memory and GPUs again (``srun`` of Slurm 22.05 no longer inherits
``--cpus-per-task`` from ``sbatch``), whose task runs ``python -m torchx_ext.schedulers.slurm.step``:
that program reads the role's command and environment from ``request.json``, so no argument
or env value of the user's ever passes through a shell. The only values in the script are
Slurm options, checked to be single lines, and paths, quoted. A role with ``max_retries`` (or an
elastic one) runs its step in a loop that starts it again after a failure.
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
from torchx_ext.schedulers.slurm.options import gpu_type_of
from torchx_ext.schedulers.slurm.records import SlurmJobDir, SlurmJobRequest, SlurmRoleRequest
from torchx_ext.schedulers.slurm.warm_step import warm_step_command

STEP_MODULE = "torchx_ext.schedulers.slurm.step"
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
    roles = [_role_request(role, cwd, interpreter) for role in app.roles]
    job_name = _JOB_NAME_INVALID.sub("-", app.name).strip("-") or "torchx"
    if gpu_types is None:
        gpu_types = [gpu_type_of(None, role.resource) for role in app.roles]
    script = batch_script(job_name, SlurmJobDir(Path(job_dir)), cwd, roles, app.roles, options, interpreter, exclusive,
                          gpu_types, allocation)
    return SlurmJobRequest(app_name=app.name, job_dir=job_dir, roles=roles, script=script,
                           options=options, workspace=workspace, allocation=allocation.job_id if allocation else "",
                           allocation_nodes=allocation.nodes if allocation else 0,
                           allocation_gpus_per_node=allocation.gpus_per_node if allocation else 0,
                           warm_step=warm_step_command(allocation, interpreter, Path(job_dir).parent)
                           if allocation and warm else [])


def batch_script(
    job_name: str,
    job: SlurmJobDir,
    cwd: str,
    roles: list[SlurmRoleRequest],
    specs_of_roles: list[specs.Role],
    options: list[str],
    interpreter: str,
    exclusive: bool,
    gpu_types: list[str] | None = None,
    allocation: Allocation | None = None,
) -> str:
    lines = [
        "#!/bin/bash",
        "# Written by torchx_ext's slurm scheduler: one srun step per role, one task per node; each",
        f"# task runs {STEP_MODULE}, which reads its command from request.json beside this script.",
    ]
    heterogeneous = len(roles) > 1 and allocation is None
    types = gpu_types or [""] * len(roles)
    if allocation is None:
        lines += [
            f"#SBATCH --job-name={job_name}",
            f"#SBATCH --chdir={cwd}",
            f"#SBATCH --output={_pattern(str(job.path))}/slurm-%j.out",
            "#SBATCH --open-mode=append",
        ]
        for position, (role, spec) in enumerate(zip(roles, specs_of_roles)):
            if position:
                lines.append("#SBATCH hetjob")
            if not position:
                lines.append(f"#SBATCH {_requeue(specs_of_roles)}")
            lines += [f"#SBATCH {option}" for option in _shape(role, spec.resource, types[position])]
            lines += [f"#SBATCH {option}" for option in options]
        lines += ["", "set -u"]
    else:
        exit_record = shlex.quote(str(job.driver_exit))
        lines += [
            f"# Run by the driver on the submitting host, as steps of allocation {allocation.job_id} (no sbatch).",
            "",
            "set -u",
            # The end, for describe: the driver is no Slurm job that accounting would remember.
            f'record_exit() {{ code=$?; echo "$code" > {shlex.quote(str(job.driver_exit) + ".tmp")} && '
            f'mv -f {shlex.quote(str(job.driver_exit) + ".tmp")} {exit_record}; }}',
            "trap record_exit EXIT",
            "trap 'exit 143' TERM",
        ]
    sruns = [_srun(position, role, spec, job, types[position], interpreter, exclusive, heterogeneous, allocation)
             for position, (role, spec) in enumerate(zip(roles, specs_of_roles))]
    budget = _whole_app_restarts(roles, specs_of_roles)
    if budget is not None:
        lines += _whole_app(sruns, job, roles, budget, interpreter)
    else:
        lines.append("steps=()")
        for role, spec, srun in zip(roles, specs_of_roles, sruns):
            # REPLICA and HOT_SPARE roles: each node's step program starts its replica again in
            # place (step.py), a task cannot be started again inside a step; the step runs again
            # only for a short end, or after Slurm requeued the job.
            reruns = 0 if role.policy.restarts_in_place else spec.max_retries
            if spec.max_retries > 0 or role.policy.carries_on_short:
                lines += _retried(srun, job, role.name, spec.max_retries, role.policy.carries_on_short, interpreter,
                                  reruns)
            else:
                lines.append(f"{srun} &")
            lines.append("steps+=($!)")
        lines += [
            "status=0",
            'for step in "${steps[@]}"; do wait "$step" || status=$?; done',
            'exit "$status"',
        ]
    return "\n".join([*lines, ""])


def _srun(position: int, role: SlurmRoleRequest, spec: specs.Role, job: SlurmJobDir, gpu_type: str, interpreter: str,
          exclusive: bool, heterogeneous: bool, allocation: Allocation | None = None) -> str:
    """The role's step: one task per node, each running the step program."""
    group = f"_HET_GROUP_{position}" if heterogeneous else ""
    nodes = f"${{SLURM_JOB_NUM_NODES{group}}}"
    cpus = f"${{SLURM_CPUS_ON_NODE{group}}}" if exclusive else str(max(1, int(spec.resource.cpu)))
    in_allocation: list[str] = []
    if allocation is not None:
        # The allocation may hold more nodes than the role asks, and other jobs' steps: its
        # replicas are counted, and the steps named for the job, which cancel finds them by.
        nodes = str(role.num_replicas)
        cpus = str(allocation.cpus_per_node) if exclusive else cpus
        in_allocation = [f"--jobid={allocation.job_id}", f"--job-name={job.path.name}"]
    # Expanded by the shell: Slurm's own variables, no user input.
    shaped = [*in_allocation, f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", f"--cpus-per-task={cpus}"]
    prefix = f"{_pattern(str(job.path))}/{_pattern(role.name)}"
    # A fixed role's step ends with its first failed task (the others could not go on); the
    # survivors of a role that carries on short (elastic, or with spares) go on without it.
    quoted = [*([f"--het-group={position}"] if heterogeneous else []), *_resources(spec.resource, gpu_type),
              f"--kill-on-bad-exit={0 if role.policy.carries_on_short else 1}", "--open-mode=append", f"--output={prefix}-%t.out",
              f"--error={prefix}-%t.err", interpreter, "-m", STEP_MODULE, str(job.path), role.name]
    return " ".join(["srun", *shaped, *map(shlex.quote, quoted)])


def _retried(srun: str, job: SlurmJobDir, role: str, max_retries: int, carries_on_short: bool, interpreter: str,
             reruns: int) -> list[str]:
    """The role's step, run again from the start (every node resumes from the checkpoint) up to
    ``reruns`` times after it fails, and after Slurm requeued the job up to ``max_retries`` times;
    a short step (``carries_on_short``) that ended with enough of its replicas done is not a failure."""
    check = shlex.join([interpreter, "-m", STEP_MODULE, "--enough-succeeded", str(job.path), role])
    record = shlex.join([interpreter, "-m", STEP_MODULE, "--record-failure", str(job.path), role])
    requeued = shlex.join([interpreter, "-m", STEP_MODULE, "--requeued", str(job.path), role, str(int(max_retries))])
    restarts = shlex.quote(str(job.restarts(role)))
    return [
        "(",
        "  attempt=0",
        # Slurm's count of requeues: one more restart, within the same max_retries.
        f'  if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then attempt=$({requeued}) || exit 1; fi',
        "  while :; do",
        f"    rm -f {shlex.quote(str(job.rendezvous_port(role)))}",  # node rank 0 picks a new store port
        f"    {srun}",
        "    code=$?",
        '    [ "$code" -eq 0 ] && exit 0',
        *([f"    {check} && exit 0"] if carries_on_short else []),
        f'    [ "$attempt" -ge {int(reruns)} ] && exit "$code"',
        f'    [ -e {shlex.quote(str(job.cancelled))} ] && exit "$code"',  # cancelled in an allocation: its steps alone
        f"    {record} || true",  # what failed it, for describe while the rerun runs
        "    attempt=$((attempt + 1))",
        f'    echo "$attempt" > {restarts}',
        "  done",
        ") &",
    ]


def _whole_app_restarts(roles: list[SlurmRoleRequest], specs_of_roles: list[specs.Role]) -> int | None:
    """How many times an app of several roles starts again as a whole: the least ``max_retries``
    of its fixed APPLICATION roles, as a JobSet's ``maxRestarts`` (None: no role asks for it, and
    each role's step runs again alone, if at all)."""
    whole = [spec.max_retries for role, spec in zip(roles, specs_of_roles)
             if role.policy.restarts_app and not role.policy.carries_on_short]
    return min(whole) if len(roles) > 1 and whole and max(whole) > 0 else None


def _whole_app(sruns: list[str], job: SlurmJobDir, roles: list[SlurmRoleRequest], budget: int, interpreter: str) -> list[str]:
    """Every role's step started together; the first to fail (an elastic one that ended with
    enough replicas done has not) stops the others and, up to ``budget`` times, they all start
    again, every node resuming from the checkpoint: torchx's APPLICATION. A REPLICA role's
    replicas still start again in place first (step.py)."""
    step = [interpreter, "-m", STEP_MODULE]
    quoted = " ".join(shlex.quote(role.name) for role in roles)
    lines = [
        f"roles=({quoted})",
        f"elastic=({' '.join('1' if role.policy.carries_on_short else '0' for role in roles)})",
        "attempt=0",
        # Slurm's count of requeues: one more restart of the app, within the same budget.
        f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then attempt=$({shlex.join([*step, "--requeued-app", str(job.path), str(budget)])}) || exit 1; fi',
        "while :; do",
        f"  rm -f {shlex.quote(str(job.rank0_address))}",  # the first role's node rank 0 publishes it again
        "  steps=()",
    ]
    for role, srun in zip(roles, sruns):
        lines += [f"  rm -f {shlex.quote(str(job.rendezvous_port(role.name)))}",
                  # exec: the pid is srun's, which cancels its step on SIGTERM.
                  f"  ( exec {srun} ) &", "  steps+=($!)"]
    lines += [
        "  failed=-1",
        '  while [ "$failed" -lt 0 ]; do',
        "    running=0",
        '    for i in "${!steps[@]}"; do',
        '      [ -n "${steps[$i]}" ] || continue',
        '      if kill -0 "${steps[$i]}" 2>/dev/null; then running=1; continue; fi',
        '      wait "${steps[$i]}"; code=$?; steps[$i]=""',
        '      [ "$code" -eq 0 ] && continue',
        f'      [ "${{elastic[$i]}}" = 1 ] && {shlex.join([*step, "--enough-succeeded", str(job.path)])} "${{roles[$i]}}" && continue',
        "      failed=$i; break",
        "    done",
        '    [ "$running" -eq 0 ] && [ "$failed" -lt 0 ] && exit 0',
        '    [ "$failed" -lt 0 ] && sleep 0.5',
        "  done",
        '  for pid in "${steps[@]}"; do [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; done',
        "  wait",
        f'  [ "$attempt" -ge {int(budget)} ] && exit "$code"',
        f'  [ -e {shlex.quote(str(job.cancelled))} ] && exit "$code"',
        f'  {shlex.join([*step, "--record-restart", str(job.path)])} "${{roles[$failed]}}" || true',
        "  attempt=$((attempt + 1))",
        "done",
    ]
    return lines


def describe_request(request: SlurmJobRequest) -> str:
    """The dry-run text: where the job lives, then the batch script as sbatch gets it."""
    lines = [f"job_dir: {request.job_dir}"]
    if request.workspace:
        lines.append(f"workspace: {request.workspace}, copied into {SlurmJobDir(Path(request.job_dir)).workspace} at "
                     "submission (without what .torchxignore excludes); the steps run in the copy")
    for role in request.roles:
        lines.append(f"{role.name}: {role.policy.min_replicas}..{role.num_replicas} nodes, cwd={role.cwd}")
        lines.append(f"  argv: {[role.entrypoint, *role.args]!r}")
        lines += [f"  env {key}={value!r}" for key, value in sorted(role.env.items())]
    if request.warm_step:
        lines.append(f"warm: the launchers forked by the allocation's warm interpreters, the step (unless one runs): "
                     f"{' '.join(word for word in request.warm_step if word.strip())}")
    return "\n".join(lines) + "\n--- batch.sh\n" + request.script


def _requeue(specs_of_roles: list[specs.Role]) -> str:
    """Slurm requeues a batch job whose node failed (went DOWN: cut off, powered off) when the
    cluster's JobRequeue allows (its default): the job starts again on other nodes. A job whose
    every role has restarts left lets it, whatever the cluster's default; otherwise it fails."""
    return "--requeue" if all(spec.max_retries > 0 for spec in specs_of_roles) else "--no-requeue"


def _shape(role: SlurmRoleRequest, resource: specs.Resource, gpu_type: str) -> list[str]:
    # Hot spares need nodes of their own from the start: a HOT_SPARE role's MIN is its quorum, not an allocation.
    nodes = f"{role.policy.min_replicas}-{role.num_replicas}" if role.policy.is_elastic else str(role.num_replicas)
    # No --ntasks-per-node here: with it Slurm 22.05 gives a MIN-MAX job MIN nodes even when MAX
    # are idle (measured on the test cluster); the step asks for one task per node itself.
    return [f"--nodes={nodes}", f"--cpus-per-task={max(1, int(resource.cpu))}",
            *_resources(resource, gpu_type)]


def _resources(resource: specs.Resource, gpu_type: str) -> list[str]:
    options = []
    if resource.memMB and resource.memMB > 0:
        options.append(f"--mem={int(resource.memMB)}M")
    if resource.gpu and resource.gpu > 0:
        # Per node, not per task: every rank of a node sees all of the node's GPUs (NVLink peers
        # included), and the launcher gives local rank r the r-th of CUDA_VISIBLE_DEVICES.
        options.append(f"--gpus-per-node={gpu_type + ':' if gpu_type else ''}{int(resource.gpu)}")
    return options


def _role_request(role: specs.Role, cwd: str, interpreter: str) -> SlurmRoleRequest:
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
    )


def _pattern(text: str) -> str:
    # srun and sbatch read % in --output as a pattern.
    return text.replace("%", "%%")

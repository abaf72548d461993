"""An allocation's warm interpreters (``-cfg warm=true``): one task per node of one step of the
allocation, which has imported torch and our launcher and forks the launchers of the jobs'
step programs on its node (``torchx_ext.warm.attach``).

They are a step so that Slurm tracks and ends what they fork: with the allocation, or when the
step is cancelled. The step overlaps every other (``--overlap``) and holds the allocation's
CPUs, memory and GPUs of each node; what it forks runs in its cgroup, bound to the CPUs its job's
step was given, but the job step's memory limit and accounting do not count it. The first job
that asks starts it, detached, and runs cold itself; its interpreters end together once none of
them had a request for ``IDLE_S`` (an activity file they share) and nothing they forked still
runs. One step per Python environment (``environment_key``): a changed venv, torch or torchx_ext
gets its own.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from torchx_ext.schedulers.slurm.allocation import Allocation, outside_allocation
from torchx_ext.schedulers.slurm.client import SlurmError, last_line, steps_of

STEP_PREFIX = "torchx_ext-warm-"
EARLY_END_S = 0.5
"""How long the first job waits to see whether srun refused the step at once."""


def warm_step_command(allocation: Allocation, interpreter: str, log_dir: Path) -> list[str]:
    """The srun that starts the allocation's warm interpreters, one on each of its nodes."""
    from torchx_ext.warm.client import ARGV_ROOM_ARGUMENT
    from torchx_ext.warm.server import environment_key

    key = environment_key(cgroup=False)
    gpus = [f"--gpus-per-node={allocation.gpus_per_node}"] if allocation.gpus_per_node else []
    # --wait=0: one node's interpreter ending first must not end the others' (a site's WaitTime would).
    return ["srun", f"--jobid={allocation.job_id}", "--overlap", f"--nodes={allocation.nodes}",
            f"--ntasks={allocation.nodes}", "--ntasks-per-node=1", f"--cpus-per-task={allocation.cpus_per_node}",
            "--mem=0", *gpus, "--kill-on-bad-exit=0", "--wait=0", f"--job-name={STEP_PREFIX}{key}",
            f"--output={str(log_dir).replace('%', '%%')}/warm-{allocation.job_id}-%t.log",
            interpreter, "-m", "torchx_ext.warm", "serve-slurm", str(log_dir / f"warm-{allocation.job_id}-{key}.active"),
            ARGV_ROOM_ARGUMENT]


def start_warm_step(command: list[str], allocation: str, environ: Mapping[str, str], log: Path) -> str:
    """Starts the step ``command`` (``warm_step_command``) in ``allocation``, detached, unless a
    step of its name runs there, srun's own messages in ``log``; what to tell the user ("": it runs)."""
    from torchx_ext.warm.client import room_environment

    name = next(word.split("=", 1)[1] for word in command if word.startswith("--job-name="))
    try:
        if any(step_name == name for _, step_name in steps_of(allocation)):
            return ""
    except SlurmError as error:
        return f"warm=true: cannot tell whether its warm interpreters run ({error}): launchers start anew"
    with open(log, "ab") as messages:
        # srun holds the step while it lives: in a session of its own, it outlives the CLI and the job.
        srun = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=messages, stderr=messages,
                                start_new_session=True, cwd="/", env={**outside_allocation(environ), **room_environment()})
    try:
        srun.wait(timeout=EARLY_END_S)
    except subprocess.TimeoutExpired:
        return "its warm interpreters start now (the next job's launchers are forked from them)"
    return (f"warm=true: its warm interpreters did not start (srun: {last_line(log.read_text(errors='replace'))}; "
            f"{log}): launchers start anew")

"""slurm: a job's replicas as one Slurm job, one task per node, bound inside what Slurm gave.

The modules every backend has: ``options.py`` (-cfg into ``#SBATCH`` options), ``request.py``
(the request, read back on every node), ``build.py`` (the pure dry-run: AppDef -> the request
and its batch script), ``view.py`` (Slurm's states read purely into ours),
``client.py`` (the thin layer over Slurm's commands: sbatch, scancel, sacct, squeue) and
``scheduler.py`` (the backend on the shared shell, ``common/scheduler.py``). Its own:
``driver.py`` (what the batch script execs: the steps and their retries, decided in
``driver_core.py``), ``step.py`` (the program each task runs), ``records.py`` (the job directory and registry) and
``workspace.py`` (the workspace copied into the job's directory). The whole map: docs/layout.md.
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # The entry point torchx loads for every command: the scheduler module (and torchx's
    # scheduler API) is imported only when a slurm scheduler is actually made.
    from torchx_ext.schedulers.slurm.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

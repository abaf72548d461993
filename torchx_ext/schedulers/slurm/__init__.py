"""slurm: a job's replicas as one Slurm job, one task per node, bound inside what Slurm gave.

``scheduler.py`` is the backend on the shared shell (``schedulers/common/scheduler.py``),
``options.py`` its ``-cfg``, ``request.py`` its pure dry-run (the batch script),
``step.py`` the program each task runs, ``records.py`` the job directory and registry,
``job_view.py`` Slurm's states in ours, ``commands.py`` Slurm's commands.
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # The entry point torchx loads for every command: the scheduler module (and torchx's
    # scheduler API) is imported only when a slurm scheduler is actually made.
    from torchx_ext.schedulers.slurm.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

"""local_cwd: a job's replicas as processes on this host, each on its own slice of it.

The modules every backend has: ``options.py`` (-cfg), ``request.py`` (the request, which the supervisor reads back), ``build.py``
(the pure dry-run: AppDef -> the request),
``scheduler.py`` (the backend on the shared shell, ``common/scheduler.py``). local_cwd has no
system to be a client of: ``supervisor.py`` is the process that runs a job, ``processes.py``
finds, checks and stops a job's processes through /proc, ``records.py`` keeps what a later
command reads (the job directory, its records, the registry) and ``targets.py`` checks what each
replica will run before anything starts. The whole map: docs/layout.md.
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # The entry point torchx loads for every command: the scheduler module (and torchx's
    # scheduler API) is imported only when a local_cwd scheduler is actually made.
    from torchx_ext.schedulers.local.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

"""local_cwd: a job's replicas as processes on this host, each on its own slice of it.

``scheduler.py`` is the backend on the shared shell (``schedulers/common/scheduler.py``),
``request.py`` its pure dry-run, ``supervisor.py`` the process that runs a job, ``records.py``
what is kept on disk, ``processes.py`` a job's processes (found, checked and stopped through
/proc), ``logs.py`` the log files.
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # The entry point torchx loads for every command: the scheduler module (and torchx's
    # scheduler API) is imported only when a local_cwd scheduler is actually made.
    from torchx_ext.schedulers.local.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

"""local_docker: one container per replica on a per-job network, each on its own slice of the host.

``request.py`` is the pure dry-run (AppDef -> containers with cpusets, GPUs, limits),
``engine.py`` the thin layer over the docker SDK, ``job_view.py`` the pure reading of a job's
state from its containers, ``snapshot.py`` the engine read now (and ending a job one of whose
replicas failed for good), ``scheduler.py`` the backend on the shared shell
(``schedulers/common/scheduler.py``), ``watcher.py`` the process that ends a job when a replica
fails for good, ``logs.py`` container logs as timed lines and ``workspace.py`` cached workspace
images.
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # The entry point torchx loads for every command: the docker SDK and the scheduler are
    # imported only when a local_docker scheduler is actually made.
    from torchx_ext.schedulers.docker.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

"""local_docker: one container per replica on a per-job network, each on its own slice of the host.

The modules every backend has: ``options.py`` (-cfg), ``request.py`` (the pure dry-run: containers
with cpusets, GPUs, limits), ``view.py`` (a job's state read purely from its containers),
``client.py`` (the thin layer over the docker SDK) and ``scheduler.py`` (the backend on the shared
shell, ``common/scheduler.py``). Its own: ``snapshot.py`` (the engine read now, and a job one of
whose replicas failed for good ended), ``watcher.py`` (the process that ends such a job) and
``logs.py`` (container logs as timed lines). Images are built and pushed in
``schedulers/images/``. The whole map: docs/layout.md.
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # The entry point torchx loads for every command: the docker SDK and the scheduler are
    # imported only when a local_docker scheduler is actually made.
    from torchx_ext.schedulers.docker.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

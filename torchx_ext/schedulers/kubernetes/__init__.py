"""kubernetes: per ``-cfg backend``, a headless Service and one Indexed ``batch/v1`` Job per role
(``job``, no CRDs needed), one JobSet (``jobset``) or one Volcano Job (``volcano``).

The modules every backend has: ``options.py`` (-cfg, checked into ``ManifestOptions``),
``request.py`` (the pure dry-run: the checks the backends share, then one backend's objects),
``view.py`` (an app's state read purely from its Jobs and pods), ``client.py`` (the thin layer
over the official client) and ``scheduler.py`` (the backend on the shared shell,
``common/scheduler.py``). Its own: ``indexed_job.py``, ``jobset.py`` and ``volcano.py`` (each
backend's objects, and the last two their state), ``pods.py`` (the pod template every backend
runs), ``overlay.py``, ``names.py``, ``backends.py`` (reading, ending, deleting and listing per
backend), ``queues.py``, ``pod_security.py``, ``network_policy.py``, ``logs.py`` and
``workspace.py`` (the workspace's image pushed and pinned by digest, built in
``schedulers/images/``). The whole map: docs/layout.md.
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # torchx loads this entry point for every command: the kubernetes client is imported only
    # when a kubernetes scheduler is actually made.
    from torchx_ext.schedulers.kubernetes.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

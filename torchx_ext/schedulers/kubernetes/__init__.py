"""kubernetes: per ``-cfg backend``, a headless Service and one Indexed ``batch/v1`` Job per role
(``job``, no CRDs needed), one JobSet (``jobset``) or one Volcano Job (``volcano``).

``options.py`` checks ``-cfg`` (into ``ManifestOptions``), ``pods.py`` builds the pod template
every backend runs (NUMA-aligned), ``manifests.py`` the pure dry-run (a dispatch to
``indexed_job.py``, ``jobset.py`` and ``volcano.py``; the last two also read their objects'
state), ``names.py`` the DNS-1123 names and our labels and annotations, ``app_view.py`` the
pure reading of an app's state from its Jobs and pods, ``backends.py`` what reading, ending,
deleting and listing do per backend, ``client.py`` the thin layer over the official client,
``logs.py`` pod logs as timed lines and ``scheduler.py`` the backend on the shared shell
(``schedulers/common/scheduler.py``).
"""

from typing import Any


def create_scheduler(session_name: str, **kwargs: Any) -> Any:
    # torchx loads this entry point for every command: the kubernetes client is imported only
    # when a kubernetes scheduler is actually made.
    from torchx_ext.schedulers.kubernetes.scheduler import create_scheduler as create

    return create(session_name, **kwargs)

"""What ``-cfg queue`` names must exist before an app is submitted to it.

torchx's kubernetes scheduler requires ``queue`` and hands it to Volcano. Ours hands it to Volcano
with ``backend=volcano`` and to Kueue (a LocalQueue; the Jobs are created suspended) with ``job``
and ``jobset``. A queue that does not exist, or a queue system that is not installed, would
leave the app PENDING forever without a word: it is refused at submission, in one line, before
anything is created. Checked with one or two list calls; a user not allowed to list queues (403)
is not stopped, since the cluster may still admit the job.
"""

from __future__ import annotations

from torchx_ext.errors import InvalidArgumentError, KubernetesError
from torchx_ext.schedulers.kubernetes.client import KUEUE_LOCAL_QUEUE, VOLCANO_QUEUE, Cluster
from torchx_ext.schedulers.kubernetes.options import DEFAULT_VOLCANO_QUEUE


def check_queue(cluster: Cluster, backend: str, namespace: str, queue: str | None) -> None:
    """InvalidArgumentError when ``queue`` cannot hold the app with ``backend`` on this cluster."""
    try:
        if backend == "volcano":
            _check_volcano_queue(cluster, queue or DEFAULT_VOLCANO_QUEUE)
        elif queue is not None:
            _check_kueue_queue(cluster, backend, namespace, queue)
    except KubernetesError as error:
        if error.status != 403:
            raise


def _check_volcano_queue(cluster: Cluster, queue: str) -> None:
    names = cluster.names_of(VOLCANO_QUEUE, None)
    if names is not None and queue not in names:  # None: no Volcano, which creating the Volcano Job says
        raise InvalidArgumentError(f"queue {queue!r}: the cluster has no Volcano queue of that name (it has "
                                   f"{_listed(names)}): give -cfg queue= one of them")


def _check_kueue_queue(cluster: Cluster, backend: str, namespace: str, queue: str) -> None:
    local = cluster.names_of(KUEUE_LOCAL_QUEUE, namespace)
    if local is None:
        said = f"queue {queue!r} names a Kueue LocalQueue with backend={backend}, and this cluster has no Kueue"
        if cluster.names_of(VOLCANO_QUEUE, None) is not None:
            raise InvalidArgumentError(f"{said}; it has Volcano, whose queue torchx's kubernetes scheduler submits to: "
                                       "add -cfg backend=volcano")
        raise InvalidArgumentError(f"{said} (nor Volcano): install Kueue (https://kueue.sigs.k8s.io), or leave queue out")
    if queue not in local:
        raise InvalidArgumentError(f"queue {queue!r}: namespace {namespace!r} has no Kueue LocalQueue of that name (it has "
                                   f"{_listed(local)}): give one of them, or ask for one to be made")


def _listed(names: list[str]) -> str:
    return ", ".join(names) if names else "none"

"""The environment variables a scheduler gives every replica, by the names both sides read.

A leaf module below the launcher and the schedulers: the schedulers set these, the launcher
(and the user's script) reads them.
"""

RANK0_HOST_ENV = "TORCHX_RANK0_HOST"
"""The host of rank 0's replica as torchx defines it, the first role's replica 0, for every role
(torchx's ``rank0_env`` macro names it to the component, which passes its name to the launcher)."""
RDZV_HOST_ENV = "TORCHX_EXT_RDZV_HOST"
"""The host of this role's replica 0, whose launcher hosts the role's rendezvous store: set by
every scheduler, and preferred by the launcher to the variable ``--rdzv-endpoint-env`` names, so
that each role of a several-role app rendezvouses on its own (``RANK0_HOST_ENV`` is the first
role's, which may not even run our launcher)."""
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
"""Where the launcher writes its replica's error report (``error_file.py``)."""
RDZV_PORT_ENV = "TORCHX_EXT_RDZV_PORT"
"""Set by a scheduler whose jobs may share a host (local_cwd; slurm, on shared nodes): the
rendezvous port it picked for the job, which wins over the launcher's ``--rdzv-port``."""
RDZV_IS_HOST_ENV = "TORCHX_EXT_RDZV_IS_HOST"
"""Set by a scheduler that decides which replica hosts the rendezvous store (local_cwd, slurm:
a role's replica 0): ``1`` on that replica, ``0`` on the others. Without it torch guesses from the host name, and
where several replicas share a name or address, whoever binds the port first hosts."""
ALLOCATED_NODES_ENV = "TORCHX_EXT_ALLOCATED_NODES"
"""Set by a scheduler that allocates an elastic job's nodes up front (slurm: ``--nodes=MIN-MAX``):
how many it got, which caps the launcher's ``--nnodes`` MAX so the rendezvous completes as soon
as they have all joined."""
LIVENESS_FILE_ENV = "TORCHX_EXT_LIVENESS_FILE"
"""Set by a scheduler that watches for frozen replicas: a file the launcher touches every second
from its start (the contract: liveness.py), whose age tells a frozen or hung replica from a busy one."""
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
"""torch's (and our launcher's): the seconds a stopped launcher gives its workers between SIGTERM and
SIGKILL. Set by a scheduler that takes ``-cfg cancel_grace`` (``shutdown_timeout_env``), so the
workers get the grace the user gave, not the launcher's 5 s; a role's own value wins."""


def shutdown_timeout_env(cancel_grace_s: float) -> dict[str, str]:
    """The workers' share of a replica's grace: a second less, which the launcher keeps to exit."""
    return {SHUTDOWN_TIMEOUT_ENV: str(max(0, int(cancel_grace_s) - 1))}


REPLICA_ENV = "TORCHX_EXT_REPLICA"
"""``role/replica_id`` of the replica, set by local_cwd (its marker for finding a replica's
processes) and local_docker: the launcher's watchdog names a lost peer by it."""

LAUNCHER_MODULE = "torchx_ext.launcher"
"""What a replica runs (``python -m``): the schedulers' warm starts fork it only."""

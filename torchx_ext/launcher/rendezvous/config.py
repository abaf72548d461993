"""The launcher's rendezvous settings: torchrun's c10d switched to the watched c10d.

``watch_rendezvous`` checks torch's c10d settings the handlers read, then rewrites a c10d
``LaunchConfig`` to our backend name (``registry.py``) with what the handler needs in
``--rdzv-conf``: the peer timeout, the restarts, the node rank, the spares, which inner handler.
Importing this imports no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.launcher.hang_watch import LaunchProgress, register
from torchx_ext.launcher.rendezvous.registry import register_backend
from torchx_ext.launcher.rendezvous.settings import (BACKEND, HANDLER_KEY, HANDLERS, NODE_RANK_KEY, RESTARTS_KEY,
                                                        SPARES_KEY, TIMEOUT_KEY, TIMEOUTS)
from torchx_ext.launcher.rendezvous.watchdog import DEFAULT_TIMEOUT_S, Loss

logger = logging.getLogger("torchx_ext.launcher")

def peer_timeout(flag: str | float | None, rdzv_configs: dict[str, Any]) -> float:
    """The timeout from ``--peer-timeout`` or, when the flag is not given, the
    ``peer_timeout`` key of ``--rdzv-conf``; the default when neither is. Checked here."""
    given, where = (flag, "--peer-timeout") if flag is not None else (rdzv_configs.get(TIMEOUT_KEY), f"--rdzv-conf {TIMEOUT_KEY}")
    if given is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(given)
    except (TypeError, ValueError):
        value = -1.0
    if not (value == 0 or 1 <= value <= 86400):
        raise InvalidArgumentError(
            f"invalid {where} {given!r}: expected seconds from 1 to 86400 (a peer silent that long is lost), or 0 for no watchdog"
        )
    return value


def watch_rendezvous(config: Any, timeout_s: float, on_store_loss: Callable[[Loss], None], node_rank: int = 0,
                     spares: int = 0, handler: str = HANDLERS[0], progress: LaunchProgress | None = None) -> None:
    """Switch ``config`` (torch's ``LaunchConfig``) from c10d to the watched c10d; leaves every
    other backend as it is. The watchdog runs for runs of more than one node, with a timeout (not
    0). A run of a fixed number of nodes orders its group ranks by the nodes' ``--node-rank`` (which
    torch's c10d ignores) whenever those are distinct (the arrival rendezvous ranks so itself;
    torch's handler is reordered by ``in_node_rank_order``). A run on torch's handler gets it
    without torch's fixed pauses (``pauses.py``). With ``progress``, each round runs the
    hang watchdog (``hang_watch.py``) too."""
    if handler not in HANDLERS:
        raise InvalidArgumentError(f"invalid --c10d-handler {handler!r}: expected one of {', '.join(HANDLERS)}")
    for key, _ in TIMEOUTS:
        _check_whole(key, config.rdzv_configs.get(key))
    config.rdzv_configs.pop(TIMEOUT_KEY, None)
    if config.rdzv_backend != "c10d":
        return
    several = config.max_nodes >= 2
    register(progress)
    # One node of a run with hot spares has no peer to watch, but still its place among the spares' ranks.
    register_backend(on_store_loss)
    config.rdzv_backend = BACKEND
    config.rdzv_configs[TIMEOUT_KEY] = timeout_s if several else 0
    config.rdzv_configs[RESTARTS_KEY] = config.max_restarts
    config.rdzv_configs[SPARES_KEY] = spares
    config.rdzv_configs[HANDLER_KEY] = handler
    fixed = config.min_nodes == config.max_nodes
    config.rdzv_configs[NODE_RANK_KEY] = node_rank if fixed and (several or spares) else -1


def c10d_handler(min_nodes: int, max_nodes: int, endpoint: str, run_id: str, rdzv_configs: dict[str, Any], *,
                 handler: str = HANDLERS[0], node_rank: int = -1, local_addr: str | None = None,
                 peer_timeout_s: float = 0, max_restarts: int = 0) -> Any:
    """The c10d rendezvous handler the launcher runs for these settings (``watch_rendezvous``, then
    torch's registry, as torch's ``launch_agent`` makes it), for tests and benches that need it
    apart from an agent. A lost store (with a peer timeout) is only logged."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
    from torch.distributed.launcher.api import LaunchConfig

    config = LaunchConfig(min_nodes=min_nodes, max_nodes=max_nodes, nproc_per_node=1, run_id=run_id,
                          rdzv_endpoint=endpoint, rdzv_backend="c10d", rdzv_configs=dict(rdzv_configs),
                          max_restarts=max_restarts)
    watch_rendezvous(config, peer_timeout_s, lambda loss: logger.warning("%s", loss.line), node_rank=node_rank,
                     handler=handler)
    return rendezvous_handler_registry.create_handler(RendezvousParameters(
        backend=config.rdzv_backend, endpoint=endpoint, run_id=run_id, min_nodes=min_nodes, max_nodes=max_nodes,
        local_addr=local_addr, **config.rdzv_configs))


def _check_whole(key: str, given: Any) -> None:
    if given is None:
        return
    try:
        seconds = int(given)
    except (TypeError, ValueError):
        seconds = 0
    if seconds <= 0:
        what = "a whole number, 1 or more" if key == "keep_alive_max_attempt" else "a whole number of seconds, 1 or more"
        raise InvalidArgumentError(f"invalid --rdzv-conf {key}={given!r}: expected {what}")

"""Which store a run's workers get, decided once for both launcher entries (CLI and ``launch``)."""

from __future__ import annotations

import os
from typing import Any

# With the c10d rendezvous, torchelastic by default hands workers the agent's own TCPStore,
# one key space for every restart: a restarted attempt can read the previous attempt's gloo
# addresses and fail or hang in init_process_group (torchrun: 2 of 10 restarts here). This
# documented switch gives each attempt a fresh store hosted by its rank 0 (rank 0's worker with
# torch's handler, rank 0's launcher with the arrival rendezvous). It costs about
# 0.3 s per start here, so it is only used where a second attempt or round can happen.
FRESH_STORE_PER_ATTEMPT_ENV = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")


def needs_fresh_store_per_attempt(config: Any) -> bool:
    """Whether a run of ``config`` (torch's ``LaunchConfig``) can have a second attempt or round."""
    return bool(config.max_restarts > 0 or config.min_nodes != config.max_nodes)


def use_fresh_store_per_attempt_if_needed(config: Any) -> None:
    """Set the switch in this process's environment (the agent reads it) unless the user set it."""
    if needs_fresh_store_per_attempt(config):
        os.environ.setdefault(*FRESH_STORE_PER_ATTEMPT_ENV)

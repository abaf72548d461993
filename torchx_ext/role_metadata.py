"""What a component records in its role's ``metadata`` for the schedulers to check before
they start anything. A leaf module: components write it, schedulers read it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TARGET_KEY = "torchx_ext/target"
"""The launcher's training target as the user gave it: ``{"script": PATH}`` or ``{"module": NAME}``."""


def target_metadata(script: str | None, module: str | None) -> dict[str, dict[str, str]]:
    return {TARGET_KEY: {"script": script} if script is not None else {"module": module or ""}}


def target_of(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """``("script", PATH)`` or ``("module", NAME)``; None for a role no component of ours made."""
    target = metadata.get(TARGET_KEY)
    if not isinstance(target, Mapping) or len(target) != 1:
        return None
    kind, name = next(iter(target.items()))
    return (kind, name) if kind in ("script", "module") and isinstance(name, str) else None


SPARES_KEY = "torchx_ext/hot_spares"  # published (docs/torchx-parity.md): a component of the user's may write it
"""The number of hot spares ``dist.*`` were given (``--spares``): torchx-nightly has no HOT_SPARE
retry policy (its roles then ask for REPLICA, which restarts the lost replica as a spare)."""


def spares_of(metadata: Mapping[str, Any]) -> int:
    given = str(metadata.get(SPARES_KEY) or "0")
    return int(given) if given.isdigit() else 0


TORCHFT_KEY = "torchx_ext/torchft"
"""What a role of a torchft job (``dist.hsdp``) is: ``lighthouse`` or ``group`` (a replica group).
A scheduler refuses such a job where it cannot restart one group alone (``backends.TORCHFT``)."""
TORCHFT_LIGHTHOUSE, TORCHFT_GROUP = "lighthouse", "group"


def is_torchft(metadata: Mapping[str, Any]) -> bool:
    return metadata.get(TORCHFT_KEY) in (TORCHFT_LIGHTHOUSE, TORCHFT_GROUP)

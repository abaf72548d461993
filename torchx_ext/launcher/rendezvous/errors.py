"""How the launcher's rendezvous ends a launch on purpose: a lost peer, a hang, attempts stuck at
one point (no restart left, or none worth making). Importing this imports no torch."""

from __future__ import annotations

from torchx_ext.errors import TorchxExtError


class PeerLostError(TorchxExtError):
    """The watchdog declared a peer or the store lost and no restart was left."""


class HangError(TorchxExtError):
    """The hang watchdog decided a hang and no restart was left."""


class StuckError(HangError):
    """Attempts kept hanging at the same point (``StuckAttempts``): restarting is pointless."""

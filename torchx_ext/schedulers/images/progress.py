"""What building and pushing a workspace image say while they run: one line per build step and per
layer pushed, on standard error.

On a terminal the line is redrawn in place (a layer's byte count ticks there too); into a pipe or a
file each change is one plain line. ``build_step`` and ``PushProgress`` read the engine's stream of
JSON events (the Docker API's, also Podman's) and are pure; ``StatusLine`` only writes.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

PREFIX = "torchx: "
STEP_WIDTH = 100
_DONE = ("Pushed", "Layer already exists", "Mounted from")
_STEP = re.compile(r"(?:Step|STEP) \d+/\d+ ?: .*")  # Docker's, Podman's


class StatusLine:
    """Lines to ``stream``; ``in_place``: each redraws the last (a terminal nothing else writes to).
    A None stream says nothing (``-cfg quiet=True``)."""

    def __init__(self, stream: TextIO | None, in_place: bool) -> None:
        self.stream = stream
        self.in_place = in_place
        self._drawn = False
        self._last = ""

    @classmethod
    def on_stderr(cls, quiet: bool = False) -> "StatusLine":
        return cls(None if quiet else sys.stderr, not quiet and sys.stderr.isatty())

    def show(self, text: str, transient: bool = False) -> None:
        """A change worth a line; ``transient`` ones (byte counts) only redraw a terminal's line."""
        if self.stream is None or text == self._last or (transient and not self.in_place):
            return
        self._last = text
        if self.in_place:
            self.stream.write(f"\r\x1b[K{PREFIX}{text}")
            self._drawn = True
        else:
            self.stream.write(f"{PREFIX}{text}\n")
        self.stream.flush()

    def close(self) -> None:
        """Ends the line in place, so what follows starts on a line of its own."""
        if self.stream is not None and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
        self._drawn = False
        self._last = ""


def build_step(event: dict[str, Any]) -> str | None:
    """The build step an engine event starts (``Step 2/3 : COPY . .``, cut to one short line),
    else None."""
    text = str(event.get("stream") or "").strip()
    if not _STEP.fullmatch(text):
        return None
    return text if len(text) <= STEP_WIDTH else f"{text[:STEP_WIDTH - 3]}..."


def event_error(event: dict[str, Any]) -> str | None:
    """The error an engine event carries (a failed step, a refused push), else None."""
    detail = event.get("errorDetail") or {}
    text = str(detail.get("message") or event.get("error") or "").strip()
    return text or None


@dataclass
class PushProgress:
    """A push's layers as the engine reports them, and the digest it ends with."""

    repository: str
    layers: dict[str, str] = field(default_factory=dict)
    """Layer id -> its last status (Preparing, Waiting, Pushing, Pushed, Layer already exists)."""
    digest: str | None = None

    def read(self, event: dict[str, Any]) -> tuple[str, bool] | None:
        """The line an event is worth, and whether it is transient; None: nothing to say."""
        aux = event.get("aux") or {}
        if aux.get("Digest"):
            self.digest = str(aux["Digest"])
            return f"pushed {self.repository}@{self.digest}", False
        layer, status = str(event.get("id") or ""), str(event.get("status") or "")
        if not layer or not status or status.startswith(f"{layer}:"):
            return None
        self.layers[layer] = status
        done = sum(1 for value in self.layers.values() if value.startswith(_DONE))
        count = f"({done}/{len(self.layers)} layers)"
        if status == "Pushing":
            detail = event.get("progressDetail") or {}
            sent = f" {_size(detail['current'])}" if detail.get("current") else ""
            sent += f" of {_size(detail['total'])}" if sent and detail.get("total") else ""
            return f"pushing {self.repository}: layer {layer}{sent} {count}", True
        if status.startswith(_DONE):
            said = {"Pushed": "pushed", "Layer already exists": "already in the registry"}.get(
                status, f"mounted from {status.removeprefix('Mounted from ')}")
            return f"pushing {self.repository}: layer {layer} {said} {count}", False
        return None


def _size(count: Any) -> str:
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"

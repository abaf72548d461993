"""Durations the way torchft's settings are given (``500ms``, ``1s``, ``1.5s``, ``2m``), as milliseconds."""

from __future__ import annotations

import re

from torchx_ext.errors import InvalidArgumentError

DURATION_FORMS = "a positive duration with its unit, e.g. 500ms, 1s, 1.5s or 2m"
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)")
_MS_PER_UNIT = {"ms": 1, "s": 1000, "m": 60_000}


def parse_ms(given: str, flag: str) -> int:
    """``given`` in whole milliseconds, at least 1; a bare number is refused (torchft's flags are in
    milliseconds, torchx's in seconds: either reading would surprise someone)."""
    match = _DURATION.fullmatch(str(given).strip().lower())
    value = round(float(match.group(1)) * _MS_PER_UNIT[match.group(2)]) if match else 0
    if value < 1:
        raise InvalidArgumentError(f"invalid {flag} {given!r}: expected {DURATION_FORMS}")
    return value

"""Resource quantities as pod specs write them ("500m", "1.5", "2Gi", "1G", "1048576")."""

from __future__ import annotations

from decimal import Decimal

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}


def parse_quantity(value: str | int | float) -> Decimal:
    """The quantity as a plain number (CPU in cores, memory in bytes); ValueError if malformed."""
    text = str(value).strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * factor
    if text and text[-1] in _DECIMAL:
        return Decimal(text[:-1]) * _DECIMAL[text[-1]]
    return Decimal(text)


def millicores(value: str | int | float) -> int:
    return int(parse_quantity(value) * 1000)

"""The NUMA options users pass (components, launcher, CLIs), checked without heavy imports.

The torchx CLI imports every component on every call, so the checks a component needs live
here rather than next to the planner.
"""

from __future__ import annotations

from torchx_ext.errors import InvalidArgumentError

MODES = ("none", "auto", "node", "socket", "exclusive", "core-complex")
DEVICE_KINDS = ("auto", "gpu", "cpu")
OMP_THREADS_FORMS = "'auto' or a positive integer"


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidArgumentError(f"unknown --numa-binding {mode!r}: valid values are {', '.join(MODES)}")
    return mode


def parse_omp_threads(value: str | int | None) -> str | int | None:
    if value is None or value == "auto":
        return value
    text = str(value)
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InvalidArgumentError(f"invalid --omp-threads {value!r}: expected {OMP_THREADS_FORMS}")
    return int(text)

"""The options users pass (components, launcher, CLIs), checked without heavy imports.

The torchx CLI imports every component on every call, so the checks a component needs live
here rather than next to the planner.
"""

from __future__ import annotations

from torchx_ext.errors import InvalidArgumentError

MODES = ("none", "auto", "node", "socket", "exclusive", "core-complex")
DEVICE_KINDS = ("auto", "gpu", "cpu")
OMP_THREADS_FORMS = "'auto' or a positive integer"
DEFAULT_HANG_TIMEOUT_S = 300.0
"""No rank moved for 5 minutes. Above what one C call on every rank may take in a healthy job
(NCCL's communicator set-up on thousands of ranks, a checkpoint's write in C) and under the
collectives' own timeouts (NCCL 10 min, gloo 30 min), which name the waiting ranks, not the hung one."""


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


def parse_hang_timeout(given: str | float | None, where: str = "--hang-timeout") -> float:
    """Seconds from ``given``: a positive number, or ``off`` (0: no watchdog); None: the default."""
    if given is None:
        return DEFAULT_HANG_TIMEOUT_S
    text = str(given).strip().lower()
    if text == "off":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 1 <= value <= 7 * 86400:
        raise InvalidArgumentError(
            f"invalid {where} {given!r}: expected seconds from 1 to 604800 (no rank moving that long is a hang), or off")
    return value

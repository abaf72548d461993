"""A wall clock off by a given number of seconds, for tests of clock skew between hosts.

Hosts disagree by seconds or minutes (a VM resumed from suspend, a container host without NTP),
and a test cannot change this host's clock. So a launcher started with
``TORCHX_EXT_TEST_CLOCK_OFFSET=SECONDS`` (say 600 or -600) reads every wall clock that far off:
``time.time`` and ``time.time_ns``, and the ``datetime`` torch's c10d handler reads its keep-alives
and deadlines with. Monotonic clocks are left alone: they are each host's own, never compared.
Nothing here runs unless the variable is set.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, tzinfo

from torchx_ext.errors import InvalidArgumentError

CLOCK_OFFSET_ENV = "TORCHX_EXT_TEST_CLOCK_OFFSET"


def clock_offset_s() -> float:
    """The offset asked for, in seconds (0 when unset)."""
    given = os.environ.get(CLOCK_OFFSET_ENV, "").strip()
    if not given:
        return 0.0
    try:
        return float(given)
    except ValueError:
        raise InvalidArgumentError(
            f"invalid {CLOCK_OFFSET_ENV} {given!r}: expected seconds, e.g. 600 or -600"
        ) from None


def apply_clock_offset() -> float:
    """Set this process's wall clocks off by ``clock_offset_s()``; returns the offset."""
    offset = clock_offset_s()
    if offset == 0:
        return 0.0
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset
    time.time_ns = lambda: real_time_ns() + int(offset * 1e9)

    class SkewedDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
            return datetime.now(tz) + timedelta(seconds=offset)  # a plain datetime: torch pickles its state

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    dynamic_rendezvous.datetime = SkewedDatetime
    return offset

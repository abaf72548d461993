"""Whether a launcher that does not host the job's store reaches it, said in one line when not.

torch's TCPStore client retries a connection for its timeout, then once more after a random
delay, and says nothing meanwhile: a launcher told an address where no store answers waits two
minutes or more in silence, then fails with a C++ stack. Here the launcher tries a plain TCP
connection first, for the same timeout: refused, timed out, no such host, each tried again as
torch would (the store's host may start later). One case is told at once: the address is this
host's own, nothing listens there, and a store listens on the same port of 127.0.0.1 only
(local_cwd's store process, or a launcher's, for a job on one host): no retry can help that.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable

from torchx_ext.launcher.rendezvous.loopback import LOOPBACK_ADDRESS, is_loopback
from torchx_ext.launcher.rendezvous.store_host import STORE_ADDR_ENV

RETRY_S = 0.5
CONNECT_S = 5.0
"""One attempt's connect timeout: a packet that is dropped is tried again, as torch's client does."""


def why_not(error: OSError) -> str:
    """What a failed connection attempt says to a user."""
    if isinstance(error, socket.gaierror):
        return "its host name does not resolve"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "timed out (a host down or a firewall dropping packets)"
    if error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"{error.strerror or 'unreachable'} (no route to that address)"
    return error.strerror or type(error).__name__


def unreachable_line(host: str, port: int, waited_s: float, reason: str, loopback_only: bool) -> str:
    """The one line a launcher ends with when it cannot reach the job's store."""
    where = f"{host}:{port}"
    if loopback_only:
        return (f"cannot reach the job's rendezvous store at {where}: connection refused, and the store "
                f"listens on {LOOPBACK_ADDRESS}:{port} only (local_cwd's store, for replicas on this host); "
                f"leave TORCHX_RANK0_HOST to the scheduler, or set {STORE_ADDR_ENV}=0.0.0.0 where replicas "
                f"reach this host at another address")
    return f"cannot reach the job's rendezvous store at {where} in {waited_s:.0f} s: {reason}"


def is_own_address(host: str) -> bool:
    """Whether ``host`` names an address of this machine other than loopback (one a socket binds to)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, address in infos:
        if family not in (socket.AF_INET, socket.AF_INET6) or is_loopback(str(address[0])):
            continue
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address[0], 0))
                return True
            except OSError:
                continue
    return False


def _connects(host: str, port: int, timeout_s: float) -> OSError | None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:
        return error


def reach_store(host: str, port: int, timeout_s: float, *, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> str | None:
    """None once a connection to ``host:port`` opens; else, after ``timeout_s`` (or at once, for a
    store on loopback only), the line to end with."""
    started = clock()
    while True:
        left = started + timeout_s - clock()
        error = _connects(host, port, max(0.1, min(CONNECT_S, left)))
        if error is None:
            return None
        if (isinstance(error, ConnectionRefusedError) and is_own_address(host)
                and _connects(LOOPBACK_ADDRESS, port, CONNECT_S) is None
                and isinstance(_connects(host, port, CONNECT_S), ConnectionRefusedError)):
            # Refused again after loopback answered: not a store on every address that came late.
            return unreachable_line(host, port, clock() - started, why_not(error), loopback_only=True)
        if clock() - started >= timeout_s:
            return unreachable_line(host, port, clock() - started, why_not(error), loopback_only=False)
        sleep(min(RETRY_S, max(0.0, started + timeout_s - clock())))

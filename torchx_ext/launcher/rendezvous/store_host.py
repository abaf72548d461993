"""A rendezvous store outside the replicas: ``python -m torchx_ext.launcher.rendezvous.store_host``.

Hosts a TCPStore on a free port, writes the port as one line on stdout, and serves until
SIGTERM or SIGINT. A scheduler that can run it apart from the replicas (local_cwd) does so for
jobs that may restart, and starts every launcher with ``is_host=false``: a TCPStore client
never reconnects, so a store inside a replica takes every survivor down with it, while this one
outlives any replica and the survivors re-rendezvous with the one restarted.
"""

from __future__ import annotations

import datetime
import os
import signal

from torchx_ext.launcher.rendezvous.loopback import LOOPBACK_ADDRESS, serve_store
from torchx_ext.launcher.open_files import raise_open_files_limit

STOP = {signal.SIGTERM, signal.SIGINT}
STORE_ADDR_ENV = "TORCHX_EXT_STORE_ADDR"


def main() -> None:
    # Blocked before the store's threads start, so they inherit it and sigwait alone takes them.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP)
    raise_open_files_limit()  # every replica's launcher keeps four connections (open_files.py)
    from torch.distributed import TCPStore

    # The replicas are on this host: on loopback only (loopback.py), unless $TORCHX_EXT_STORE_ADDR names
    # where replicas elsewhere reach it (the tests' network namespaces do).
    address = os.environ.get(STORE_ADDR_ENV, LOOPBACK_ADDRESS)
    if address == LOOPBACK_ADDRESS:
        store = serve_store(0, 60)
    else:
        store = TCPStore(address, 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    print(store.port, flush=True)
    signal.sigwait(STOP)


if __name__ == "__main__":
    main()

"""The lighthouse role of a ``dist.hsdp`` job: torchft's lighthouse, run until every replica group is done.

    python -m torchx_ext.ft.lighthouse --job APP_ID --groups 2 --min-replicas 1 --port 29510 \\
        --heartbeat-timeout-ms 1000 --quorum-tick-ms 100 --join-timeout-ms 60000

It serves torchft's lighthouse on ``--port`` and the groups' "done" on the port after it
(``ending.py``), both on every interface (the groups run on other hosts), or on 127.0.0.1 where
torchx's rank-0 host, its own, is loopback (local_cwd: every group is on this host); it exits 0 once
every group has heard that all are done. SIGTERM (a cancel) stops it at once.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from torchx_ext.exit_codes import BAD_INPUT, FAILED, OK
from torchx_ext.ft import INSTALL_HINT, ending_port
from torchx_ext.ft.ending import LINGER_S, EndServer, print_line
from torchx_ext.launcher.rendezvous.loopback import is_loopback
from torchx_ext.replica_env import RANK0_HOST_ENV


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m torchx_ext.ft.lighthouse", description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="the app id: a group checks that it reached its own job's")
    parser.add_argument("--groups", type=int, required=True, help="replica groups in the job")
    parser.add_argument("--min-replicas", type=int, default=1, help="groups a quorum needs (torchft's min_replicas)")
    parser.add_argument("--port", type=int, required=True, help="torchft's lighthouse port; the next one hears 'done'")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=1000)
    parser.add_argument("--quorum-tick-ms", type=int, default=100)
    parser.add_argument("--join-timeout-ms", type=int, default=60000)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.groups < 1 or not 1 <= args.min_replicas <= args.groups:
        print(f"error: --groups {args.groups} and --min-replicas {args.min_replicas}: expected 1 <= min-replicas "
              "<= groups", file=sys.stderr)
        return BAD_INPUT
    try:
        from torchft._torchft import LighthouseServer
    except ImportError as error:
        print(f"error: the lighthouse needs torchft, which is not installed here ({error}): {INSTALL_HINT}",
              file=sys.stderr)
        return BAD_INPUT
    stopped = threading.Event()
    signals: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        signals.append(signum)
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # torchx's rank 0 is this role's host: on loopback (local_cwd) every group is on this host.
    loopback = is_loopback(os.environ.get(RANK0_HOST_ENV, ""))
    try:
        ending = EndServer(ending_port(args.port), args.groups, args.job, host="127.0.0.1" if loopback else "")
        lighthouse = _serve(LighthouseServer, args, loopback)
    except Exception as error:  # a port taken (another job's lighthouse?), an interface missing
        print(f"error: the lighthouse cannot listen on ports {args.port} and {ending_port(args.port)}: {error}",
              file=sys.stderr)
        return FAILED
    ending.start()
    print_line(f"lighthouse {lighthouse.address()} of job {args.job} for {args.groups} replica groups (min_replicas "
               f"{args.min_replicas}, heartbeat timeout {args.heartbeat_timeout_ms} ms); 'done' on port "
               f"{ending_port(args.port)}")

    def everyone_told() -> None:
        ending.wait_until_everyone_told()
        stopped.set()

    threading.Thread(target=everyone_told, daemon=True).start()
    stopped.wait()
    if signals:
        print_line(f"stopped by {signal.Signals(signals[0]).name}")
    else:
        print_line(f"every replica group is done ({args.groups})")
        time.sleep(LINGER_S)  # the others, still asking, hear bye too
    lighthouse.shutdown()
    ending.stop()
    return 128 + signals[0] if signals else OK


def _serve(server_type: Any, args: argparse.Namespace, loopback: bool) -> Any:
    settings = dict(min_replicas=args.min_replicas, join_timeout_ms=args.join_timeout_ms,
                    quorum_tick_ms=args.quorum_tick_ms, heartbeat_timeout_ms=args.heartbeat_timeout_ms)
    if loopback:
        return server_type(bind=f"127.0.0.1:{args.port}", **settings)
    try:
        return server_type(bind=f"[::]:{args.port}", **settings)
    except Exception as error:
        if "in use" in str(error).lower() or getattr(error, "errno", None) == errno.EADDRINUSE:
            raise
        return server_type(bind=f"0.0.0.0:{args.port}", **settings)  # a host without IPv6


if __name__ == "__main__":
    sys.exit(main())

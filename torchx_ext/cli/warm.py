"""``torchx warm status|stop``: the warm interpreter of this Python environment (local_cwd's
``-cfg warm=true``), how it is, and ending it. No torch import."""

from __future__ import annotations

import argparse
import time

from torchx.cli.cmd_base import SubCommand


class CmdWarm(SubCommand):
    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument("action", choices=("status", "stop"),
                               help="status: whether one runs, since when, how many jobs it started; stop: end it")

    def run(self, args: argparse.Namespace) -> None:
        print(report(args.action), flush=True)


def report(action: str) -> str:
    from torchx_ext.warm import client
    from torchx_ext.warm.server import IDLE_S, socket_path

    try:
        socket_path()
    except OSError as error:
        return f"no warm interpreter can run here: {error}"

    if action == "stop":
        pid = client.stop()
        return f"stopped the warm interpreter (pid {pid})" if pid else "no warm interpreter runs for this environment"
    found = client.status()
    if found is None:
        return (f"no warm interpreter runs for this environment ({socket_path()}); the next local_cwd job with "
                "-cfg warm=true starts one")
    age = time.time() - float(found["started"])
    return (f"warm interpreter pid {found['pid']} for {found['python']}, up {age:.0f} s, {found['served']} requests "
            f"answered; it ends after {IDLE_S:.0f} s without one ({socket_path()})")

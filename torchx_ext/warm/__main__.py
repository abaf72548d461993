"""``python -m torchx_ext.warm serve SOCKET|serve-slurm ACTIVITY|status|stop``: the warm interpreter itself
(started by the client, detached; on a Slurm node, a task of the allocation's warm step), and the
answers ``torchx warm`` prints."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve"] and len(args) in (2, 3):  # the third: room for its forks' cmdlines
        from torchx_ext.warm.server import serve

        serve(Path(args[1]))
        return 0
    if args[:1] == ["serve-slurm"] and len(args) == 3:  # the activity file every node's touches; room
        import os

        from torchx_ext.warm.server import serve, slurm_socket_path

        serve(slurm_socket_path(os.environ["SLURM_JOB_ID"], os.environ["SLURMD_NODENAME"]), activity=Path(args[1]))
        return 0
    from torchx_ext.cli.warm import report

    if len(args) == 1 and args[0] in ("status", "stop"):
        print(report(args[0]))
        return 0
    print("usage: python -m torchx_ext.warm serve SOCKET | serve-slurm ACTIVITY_FILE | status | stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""What each c10d handler does when one node's wall clock is off: two members (node ranks 0 and 1)
and a hot spare (node rank 2) of a 2-node rendezvous, each a process of its own over one TCPStore
(tests/integration/jobs/rendezvous_node.py: it rendezvouses again whenever nodes wait, as torch's
agent does), keep-alive 1 s x 3. One node's clocks are set off by ``TORCHX_EXT_TEST_CLOCK_OFFSET``
(``time.time`` and the ``datetime`` torch's handler reads). Reported per case: the round each
member joined first (rank, world size; they must agree), the restarts each member made in the
12 s after the spare came, and whether the spare joined a round (it must not: nobody was lost).

    .venv/bin/python scripts/bench/rendezvous_clock_skew.py [--handlers arrivals,torch] [--offsets 4,600,-600]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SETTINGS = {"keep_alive_interval": 1, "keep_alive_max_attempt": 3}
WATCH_S = 12.0


def case(kind: str, offsets: list[str]) -> str:
    """``offsets``: member 0's, member 1's, the spare's (seconds)."""
    import torch.distributed as dist

    from tests.integration.rendezvous_nodes import start_node
    from tests.integration.test_rendezvous_faults import Node

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    nodes: list[Node] = []
    try:
        for rank, offset in enumerate(offsets[:2]):
            nodes.append(Node(start_node(kind, server.port, 2, 2, env={"TORCHX_EXT_TEST_CLOCK_OFFSET": offset},
                                         node_rank=rank, **SETTINGS)))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(node.said("joined") for node in nodes):
            time.sleep(0.1)
        first = [node.said("joined")[0][1].removeprefix("joined ") if node.said("joined") else "none" for node in nodes]
        nodes.append(Node(start_node(kind, server.port, 2, 2, env={"TORCHX_EXT_TEST_CLOCK_OFFSET": offsets[2]},
                                     node_rank=2, **SETTINGS)))
        time.sleep(WATCH_S)
        restarts = [len(node.said("restart")) for node in nodes[:2]]
        spare = "joined" if nodes[2].said("joined") else "waits"
        return f"first rounds (rank world) {first}; restarts {restarts}; spare {spare}"
    finally:
        for node in nodes:
            node.process.kill()
            node.process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handlers", default="arrivals,torch")
    parser.add_argument("--offsets", default="4,600,-600")
    args = parser.parse_args()
    kinds = args.handlers.split(",")
    try:
        skews = [float(offset) for offset in args.offsets.split(",")]
    except ValueError:
        parser.error(f"--offsets {args.offsets!r}: expected seconds, comma-separated, e.g. 4,600,-600")
    if any(kind not in ("arrivals", "torch") for kind in kinds):
        parser.error(f"--handlers {args.handlers!r}: expected some of arrivals, torch")
    print(f"rendezvous_clock_skew: 2 members + 1 spare, keep-alive 1 s x 3, watched {WATCH_S:g} s after the spare came",
          flush=True)
    for skew in skews:
        for who, offsets in (("the spare", ["0", "0", str(skew)]), ("member 0", [str(skew), "0", "0"])):
            for kind in kinds:
                print(f"{kind:>9}  {who} {skew:+g} s: {case(kind, offsets)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

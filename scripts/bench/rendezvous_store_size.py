"""Keys in the rendezvous store, and in the workers' store, after many restarts: do they stay bounded?

N nodes (threads, each with a store client of its own, on the launcher's c10d handler as the
launcher builds it) rendezvous R times in a row, as a job whose every node restarts its workers R
times does. After each round every node writes what torch's agent and our watchdog write into the
round's store (the agent's role info and assigned ranks, its exit barrier; the watchdog's name,
beat and wake keys), so all three kinds of keys are counted. The store is a TCPStore server in a
process of its own (rendezvous_scale.py's); its key count is read after each round. Each node's
worker then writes into the workers' store (the one rank 0's launcher serves: the arrival
rendezvous only) what a worker writes there: its process group's address, as torch 2.13 names it,
and the same under ``/worker/attempt_R/``, as torch before 2.4 prefixed it by attempt. Target: at
most 20 N keys in each whatever R (torch's handler, stock, deletes nothing: 5N+3 more keys a round).

    .venv/bin/python scripts/bench/rendezvous_store_size.py [--nodes 64] [--rounds 1000] [--handlers arrivals,torch]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import timedelta
from typing import Any

HANDLERS = ("arrivals", "torch")
BOUND_PER_NODE = 20


def agent_and_watchdog_keys(store: Any, rank: int, world_size: int) -> None:
    """What one node's agent and watchdog write into a round's store (torch's and our key names)."""
    from torch.distributed import PrefixStore
    from torch.distributed.elastic.utils.store import barrier

    from torchx_ext.launcher.rendezvous.watchdog import KEY_PREFIX

    store.set(f"torchelastic/role_info/{rank}", "role")
    if rank == 0:
        store.multi_set([f"torchelastic/assigned_ranks/{r}" for r in range(world_size)], ["ranks"] * world_size)
    watchdog = PrefixStore(KEY_PREFIX, store)
    watchdog.set(f"name.{rank}", "node")
    watchdog.add(f"beat.{rank}", 1)
    watchdog.set(f"wake.{rank}", "")
    barrier(store, world_size, key_prefix="torchelastic/agent/terminal_state", barrier_timeout=300)


def worker_keys(info: Any, round_: int) -> Any:
    """What one node's worker writes into the workers' store; a client of that store."""
    import torch.distributed as dist

    bootstrap = info.bootstrap_store_info
    client = dist.TCPStore(bootstrap.master_addr, bootstrap.master_port, is_master=False,
                           timeout=timedelta(seconds=300))
    client.set(f"default_pg/0//cpu//0/{info.rank}", "address")
    client.set(f"/worker/attempt_{round_}/default_pg/0//cpu//0/{info.rank}", "address")
    return client


def run(kind: str, nodes: int, rounds: int, report_at: set[int]) -> list[tuple[int, int, int | None, float]]:
    """(round, keys in the store, keys in the workers' store, seconds so far) at each round of ``report_at``."""
    import torch.distributed as dist
    from rendezvous_scale import start_store_server  # type: ignore[import-not-found]  # this script's folder

    from torchx_ext.launcher.rendezvous.config import c10d_handler

    process, port = start_store_server()
    server = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=300))
    configs = {"is_host": False, "join_timeout": 300, "read_timeout": 300}
    handlers = [c10d_handler(nodes, nodes, f"127.0.0.1:{port}", f"size-{kind}", configs, handler=kind,
                             local_addr="127.0.0.1") for _ in range(nodes)]
    start = threading.Barrier(nodes + 1)
    done = threading.Barrier(nodes + 1)
    failures: list[BaseException] = []

    workers_store: list[Any] = [None]

    def node(handler: Any) -> None:
        for round_ in range(rounds):
            start.wait()
            try:
                info = handler.next_rendezvous()
                agent_and_watchdog_keys(info.store, info.rank, info.world_size)
                if handler.use_agent_store:  # the arrival rendezvous: rank 0's launcher serves it
                    client = worker_keys(info, round_)
                    if info.rank == 0:
                        workers_store[0] = client
            except BaseException as error:  # reported by the main thread, which then stops
                failures.append(error)
            done.wait()

    threads = [threading.Thread(target=node, args=(handler,), daemon=True) for handler in handlers]
    for thread in threads:
        thread.start()
    began, seen = time.monotonic(), []
    for round_ in range(1, rounds + 1):
        start.wait()
        done.wait()
        if failures:
            raise RuntimeError(f"round {round_}: {failures[0]!r}")
        if round_ in report_at:
            workers = workers_store[0].num_keys() if workers_store[0] is not None else None
            seen.append((round_, server.num_keys(), workers, time.monotonic() - began))
    for handler in handlers:
        handler.shutdown()
    process.kill()
    process.wait()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--handlers", default="arrivals")
    args = parser.parse_args()
    kinds = args.handlers.split(",")
    if args.nodes < 2 or args.rounds < 1 or any(kind not in HANDLERS for kind in kinds):
        parser.error(f"--nodes {args.nodes} --rounds {args.rounds} --handlers {args.handlers!r}: expected 2 or more "
                     f"nodes, 1 or more rounds, handlers among {', '.join(HANDLERS)}")
    report_at = {r for r in (1, 2, 3, 10, 100, 1000, 10000) if r <= args.rounds} | {args.rounds}
    bound = BOUND_PER_NODE * args.nodes
    over = False
    print(f"rendezvous_store_size: {args.nodes} nodes, {args.rounds} rounds; keys in the store after each round "
          f"named (bound {BOUND_PER_NODE} N = {bound})", flush=True)
    for kind in kinds:
        seen = run(kind, args.nodes, args.rounds, report_at)
        shown = ", ".join(f"round {r}: {keys} ({keys / args.nodes:.1f} N)" for r, keys, _, _ in seen)
        last, workers = seen[-1][1], seen[-1][2]
        over = over or last > bound or (workers is not None and workers > bound)
        print(f"{kind:>9}  {shown}; {seen[-1][3]:.0f} s; {'within' if last <= bound else 'OVER'} the bound",
              flush=True)
        if workers is not None:
            shown = ", ".join(f"round {r}: {keys} ({keys / args.nodes:.1f} N)" for r, _, keys, _ in seen if keys is not None)
            print(f"{'':>9}  the workers' store: {shown}; {'within' if workers <= bound else 'OVER'} the bound",
                  flush=True)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

"""How the c10d rendezvous scales with the number of nodes: N simulated nodes join one rendezvous
through a real TCPStore, train (beating and watching as our launcher's watchdog does), lose one
node and rendezvous again. torch's stock c10d handler, ours (torch's handler in the launcher's
wrapper: ``--c10d-handler torch``) and arrivals (what the launcher runs for ``--rdzv-backend c10d``
by default: the arrival rendezvous, ``torchx_ext/launcher/rendezvous/arrivals.py``, a constant
number of store operations per node, in the same wrapper) in the same run, each (handler, N) in a
process of its own.

Each node is a thread with a TCPStore client of its own, as a launcher has, in one of up to
``--processes`` processes (8; at most one per 16 nodes), which the case's process starts and steps
through the phases; the store is a TCPStore server in another process. Reported per case:

- join: from the moment every node calls ``next_rendezvous`` until the last has its round (or how
  many had one when ``--timeout`` ran out), and the store operations and bytes each node spent
  on it (mean and most): every call its store client made, counted on the client side (keys and
  values, not TCPStore's framing);
- while training (``--train-s``): the handler's own operations per node and second (its
  keep-alives, and ``num_nodes_waiting`` asked every 0.1 s as torch's agent does) and the
  watchdog's (its beats and reads);
- a loss: one node stops (its watchdog beats and its rendezvous keep-alives, as a frozen host);
  the survivors' watchdogs notice it (``--peer-timeout``) and they rendezvous again, with a
  replacement that joins at once (a restarted replica, or a hot spare): the time from the
  freeze to the first detection, from there to the new round, and the operations per node;
- the store server's CPU seconds over the whole case, and its open files at most;
- the workers (``--ranks-per-node M``, its own line): N x M ranks each open a client of a workers'
  store, as ``init_process_group`` does (the launcher adds none of its own), and meet there once.

Every handler runs as our launcher runs a job that may restart (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``:
with the agents' store shared, as torchrun's default, the replacement waits for ever) and with the
same watchdog, run by the bench (the wrapper's own is off here, as it cannot clone a store the
bench counts through). The watchdog asks the agent to
rendezvous again; the bench does so directly.

How this differs from N real nodes: every node shares this host's CPUs, and a process's nodes share
one Python interpreter (the GIL), so one node's work (unpickling torch's state blob, for one) delays
the others of its process, and they run one after another where the GIL is held (a loss that wakes
every node wakes a few hundred threads a process at once); the network is loopback (no
latency, no bandwidth limit); the store's host is a process of its own, not one of the nodes. The
absolute times are worse than on real nodes; how they grow with N is the point.

torch's TCPStore looks up the name of every peer that connects (a reverse DNS query, server and
client side, in the server's only event-loop thread). A loopback peer reaches the server as
``::ffff:127.0.0.1``, which no stock /etc/hosts names, so every connection costs a DNS query;
where the DNS server drops one (this VM's drops about one in 50) the whole store stalls for the
resolver's timeout, 5 s. Run as root, the bench gives each case a mount namespace of its own
whose /etc/hosts names that address, as a cluster's hosts file or DNS names its nodes; otherwise
it says that the stalls are in its figures.

    .venv/bin/python scripts/bench/rendezvous_scale.py [--nodes 8,64,256,1024] [--handlers torch,ours,arrivals]
        [--timeout 120] [--train-s 60] [--peer-timeout 10] [--ranks-per-node 8] [--processes 8]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from torchx_ext.launcher.open_files import raise_open_files_limit  # noqa: E402
from torchx_ext.launcher.rendezvous.worker_store import FRESH_STORE_PER_ATTEMPT_ENV  # noqa: E402

HANDLERS = ("torch", "ours", "arrivals")
STORE_SERVER = """
import sys
from torchx_ext.launcher.open_files import raise_open_files_limit
raise_open_files_limit()
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(store.port, flush=True)
sys.stdin.read()
"""


class Tally:
    """Store operations and the bytes of their keys and values, from any thread."""

    def __init__(self) -> None:
        self.ops = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def note(self, parts: Sequence[object]) -> None:
        size = sum(_size(part) for part in parts)
        with self._lock:
            self.ops += 1
            self.bytes += size

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.ops, self.bytes


def _size(part: object) -> int:
    if isinstance(part, (bytes, str)):
        return len(part)
    if isinstance(part, (list, tuple)):
        return sum(_size(item) for item in part)
    return 8 if isinstance(part, int) else 0


def counting_store(inner: Any, tally: Tally, prefix: str = "", clone_to: Sequence[Any] = ()) -> Any:
    """``inner`` (a TCPStore client) whose every call is counted in ``tally``; keys under ``prefix``;
    ``clone_to``: the clients clones use, one each (made beforehand: TCPStore's clone took up to
    0.25 s here, which many nodes' watchdogs cloning at once in one process wait for one after
    another); past them a clone connects itself."""
    spare_clients = list(clone_to)
    import torch.distributed as dist

    class CountingStore(dist.Store):  # type: ignore[misc]  # torch is untyped here
        def __init__(self) -> None:
            super().__init__()

        def set(self, key: str, value: Any) -> None:
            tally.note((key, value))
            inner.set(prefix + key, value)

        def get(self, key: str) -> bytes:
            value = inner.get(prefix + key)
            tally.note((key, value))
            return bytes(value)

        def add(self, key: str, amount: int) -> int:
            tally.note((key, amount))
            return int(inner.add(prefix + key, amount))

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            value = inner.compare_set(prefix + key, expected, desired)
            tally.note((key, expected, desired, value))
            return bytes(value)

        def check(self, keys: list[str]) -> bool:
            tally.note(keys)
            return bool(inner.check([prefix + key for key in keys]))

        def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
            tally.note(keys)
            named = [prefix + key for key in keys]
            inner.wait(named) if timeout is None else inner.wait(named, timeout)

        def multi_get(self, keys: list[str]) -> list[bytes]:
            values = inner.multi_get([prefix + key for key in keys])
            tally.note((keys, values))
            return [bytes(value) for value in values]

        def multi_set(self, keys: list[str], values: list[Any]) -> None:
            tally.note((keys, values))
            inner.multi_set([prefix + key for key in keys], values)

        def delete_key(self, key: str) -> bool:
            tally.note((key,))
            return bool(inner.delete_key(prefix + key))

        def num_keys(self) -> int:
            tally.note(())
            return int(inner.num_keys())

        def list_keys(self) -> list[str]:  # the whole store's (the rendezvous deletes old rounds by it)
            keys = [str(key) for key in inner.list_keys()]
            tally.note(keys)
            return [key[len(prefix):] for key in keys if key.startswith(prefix)]

        def set_timeout(self, timeout: datetime.timedelta) -> None:
            inner.set_timeout(timeout)

        def clone(self) -> Any:  # a connection of its own, counted alike (the watchdog's two)
            return counting_store(spare_clients.pop() if spare_clients else inner.clone(), tally, prefix)

    store = CountingStore()
    # A C++ PrefixStore over it keeps only its C++ half alive: the Python half must live on.
    _KEPT.append(store)
    return store


_KEPT: list[Any] = []


def make_handler(kind: str, store: Any, run_id: str, nodes: int, timeout_s: float, endpoint: str) -> Any:
    """A node's rendezvous handler over ``store``: torch's stock c10d one; ours, as the launcher
    runs ``--rdzv-backend c10d`` (torch's in the watched wrapper); or arrivals, as with
    ``--c10d-handler arrivals`` (the arrival rendezvous in the same wrapper). The wrapper's own
    watchdog is off: the bench runs the same one for every handler."""
    from torchx_ext.launcher.rendezvous.watched import watched_handler

    if kind == "arrivals":
        from torchx_ext.launcher.rendezvous.arrival_handler import arrival_handler

        inner = arrival_handler(store, run_id, nodes, nodes, join_timeout_s=timeout_s, local_addr="127.0.0.1")
    else:
        from torch.distributed.elastic.rendezvous import RendezvousParameters
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

        params = RendezvousParameters(backend="c10d", endpoint=endpoint, run_id=run_id, min_nodes=nodes,
                                      max_nodes=nodes, join_timeout=int(timeout_s), local_addr="127.0.0.1")
        inner = create_handler(store, C10dRendezvousBackend(store, run_id), params)
        if kind == "torch":
            return inner
    return watched_handler(inner, timeout_s=0, restarts=3, endpoint=endpoint, on_store_loss=lambda loss: None,
                           node_rank=-1, local_addr="127.0.0.1", spares=0, max_nodes=nodes)


def freeze(kind: str, handler: Any) -> None:
    """Stop a node's rendezvous keep-alives, as a frozen host's stop (torch's private timer; the
    arrival rendezvous' public ``stop_beating``)."""
    if kind == "arrivals":
        handler._inner.rendezvous.stop_beating()
        return
    inner = handler if kind == "torch" else handler._inner
    inner._stop_heartbeats()


def per_node(deltas: list[tuple[int, int]]) -> dict[str, float]:
    ops = [op for op, _ in deltas] or [0]
    sizes = [size for _, size in deltas] or [0]
    return {"ops_mean": sum(ops) / len(ops), "ops_max": max(ops), "kb_mean": sum(sizes) / len(sizes) / 1024,
            "kb_max": max(sizes) / 1024}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def start_store_server() -> tuple[subprocess.Popen[str], int]:
    """A TCPStore server in a process of its own, and its port."""
    server = subprocess.Popen([sys.executable, "-c", STORE_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert server.stdout is not None
    return server, int(server.stdout.readline())


class Channel:
    """JSON lines to and from a process: the case's commands to a node group, its replies."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        if not text:
            raise RuntimeError(f"a node group (pid {self.process.pid}) ended with {self.process.wait()}")
        return dict(json.loads(text))


def _send(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def _receive() -> dict[str, Any]:
    return dict(json.loads(sys.stdin.readline()))


MONITOR_INTERVAL_S = 0.1
"""torchrun's ``--monitor-interval`` default: how often the agent asks ``num_nodes_waiting``."""


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def run_group(kind: str, nodes: int, first: int, end: int, port: int, timeout_s: float, peer_timeout_s: float) -> None:
    """Nodes ``first`` to ``end - 1`` of one case, as threads of this process, each phase started
    by the case's process (stdin) and reported to it (stdout). Times are CLOCK_MONOTONIC, which
    every process of this host shares."""
    import torch.distributed as dist

    from torchx_ext.launcher.rendezvous.watchdog import Loss, RoundWatch

    raise_open_files_limit()
    threading.stack_size(512 * 1024)
    # As our launcher runs a job that may restart (rendezvous/worker_store.py): with the agents' store
    # shared, torch's rank 0 publishes the workers' store address in the first round only, and a
    # replacement ranked after it waits for it in the next round for ever.
    os.environ.update([FRESH_STORE_PER_ATTEMPT_ENV])
    endpoint = f"127.0.0.1:{port}"

    def client() -> Any:
        return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s + 60))

    mine = range(first, end)
    # Connections are made before the clock starts: connecting is not the rendezvous.
    tallies = {i: Tally() for i in mine}
    clients = {i: client() for i in mine}
    handlers = {i: make_handler(kind, counting_store(clients[i], tallies[i]), f"bench-{kind}", nodes, timeout_s,
                                endpoint) for i in mine}
    done: dict[int, float] = {}
    infos: dict[int, Any] = {}
    failures: list[str] = []

    def join(index: int, handler: Any, at: float) -> None:
        _sleep_until(at)
        try:
            infos[index] = handler.next_rendezvous()
            done[index] = time.monotonic()
        except Exception as error:  # timed out, or the store went away at the end of a case
            failures.append(f"{type(error).__name__}: {error}")

    def run_all(threads: list[threading.Thread], deadline: float) -> None:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    _send({"ready": True})
    at = _receive()["at"]
    run_all([threading.Thread(target=join, args=(i, handlers[i], at), daemon=True) for i in mine], at + timeout_s)
    _send({"done": list(done.items()), "join": [tally.snapshot() for tally in tallies.values()],
           "failures": failures[:1]})
    if "prepare" not in _receive():
        os._exit(0)

    # Training: every node beats and watches its ring neighbours, as the launcher's watchdog does.
    detected: dict[int, float] = {}
    noticed_events = {i: threading.Event() for i in mine}  # a survivor sleeps until its own
    watch_tallies = {i: Tally() for i in mine}
    losses: list[str] = []

    def on_loss(index: int) -> Callable[[Loss], None]:
        def noticed(loss: Loss) -> None:
            if index not in detected:
                detected[index] = time.monotonic()
                losses.append(loss.line)
                noticed_events[index].set()
        return noticed

    # The round's store (the agent's client), with the connections its clones get made beforehand:
    # the watchdog's beats' and its listener's. Every group has them before any watch starts.
    round_stores = {i: counting_store(clients[i], watch_tallies[i], "bench.round1/", clone_to=(client(), client()))
                    for i in mine}
    _send({"ready": True})
    command = _receive()
    _sleep_until(command["train_from"])
    handler_before = {i: tally.snapshot() for i, tally in tallies.items()}
    watch_before = {i: tally.snapshot() for i, tally in watch_tallies.items()}
    watches = {i: RoundWatch(round_stores[i], infos[i].rank, nodes, peer_timeout_s, on_loss(i), endpoint).start()
               for i in mine}
    while time.monotonic() < command["train_until"]:  # torch's agent asks every monitor interval (0.1 s)
        for i in mine:
            handlers[i].num_nodes_waiting()
        time.sleep(MONITOR_INTERVAL_S)
    spent = time.monotonic() - command["train_from"]
    _send({"handler_ops_per_s": sum(tallies[i].snapshot()[0] - handler_before[i][0] for i in mine) / spent,
           "watchdog_ops_per_s": sum(watch_tallies[i].snapshot()[0] - watch_before[i][0] for i in mine) / spent})

    # A loss: the victim stops; a replacement joins at once; the survivors once they notice.
    command = _receive()
    victim, deadline = command["victim"], command["deadline"]
    before = {i: tally.snapshot() for i, tally in tallies.items()}
    done.clear()
    threads = []
    frozen_at = None
    replacement_tally = Tally()
    if victim in mine:
        watches[victim].stop()
        freeze(kind, handlers[victim])
        frozen_at = time.monotonic()
        replacement = make_handler(kind, counting_store(client(), replacement_tally), f"bench-{kind}", nodes,
                                   timeout_s, endpoint)
        threads.append(threading.Thread(target=join, args=(victim, replacement, 0.0), daemon=True))

    def survivor(index: int) -> None:
        # Waiting on an event, not polling: a thousand threads polling would hold the GIL from
        # the watchdogs and time the bench, not the rendezvous.
        noticed_events[index].wait(max(0.0, deadline - time.monotonic()))
        watches[index].stop()
        if index in detected:
            join(index, handlers[index], 0.0)

    threads += [threading.Thread(target=survivor, args=(i,), daemon=True) for i in mine if i != victim]
    run_all(threads, deadline)
    rejoin = [(tallies[i].snapshot()[0] - before[i][0], tallies[i].snapshot()[1] - before[i][1])
              for i in mine if i != victim]
    _send({"frozen_at": frozen_at, "detected": list(detected.items()), "done": list(done.items()),
           "losses": losses[:1], "rejoin": rejoin + ([replacement_tally.snapshot()] if victim in mine else []),
           "failures": failures[:1]})
    _receive()
    os._exit(0)  # threads still waiting on a store that is gone do not hold the process


def groups_of(nodes: int, processes: int) -> list[tuple[int, int]]:
    """The nodes each process runs: ``processes`` spans at most, of 16 nodes or more."""
    count = max(1, min(processes, nodes // 16))
    return [(nodes * part // count, nodes * (part + 1) // count) for part in range(count)]


def run_case(kind: str, nodes: int, timeout_s: float, train_s: float, peer_timeout_s: float,
             processes: int) -> dict[str, Any]:
    """One (handler, N) case, its nodes in up to ``processes`` processes; what it measured."""
    raise_open_files_limit()
    server, port = start_store_server()
    result: dict[str, Any] = {"handler": kind, "nodes": nodes}
    most_files = [open_files(server.pid)]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.5):
            try:
                most_files[0] = max(most_files[0], open_files(server.pid))
            except OSError:  # the case is over: the server is gone
                return

    threading.Thread(target=sample, daemon=True).start()
    groups = [Channel(subprocess.Popen(
        [sys.executable, __file__, "--group", kind, str(nodes), str(first), str(end), str(port), "--timeout",
         str(timeout_s), "--peer-timeout", str(peer_timeout_s)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)) for first, end in groups_of(nodes, processes)]
    result["processes"] = len(groups)

    def everyone(message: dict[str, Any]) -> list[dict[str, Any]]:
        for group in groups:
            group.send(message)
        return [group.receive() for group in groups]

    try:
        for group in groups:
            group.receive()  # ready: every node has its connection and handler
        began = time.monotonic() + 1.0
        replies = everyone({"at": began})
        done = dict(pair for reply in replies for pair in reply["done"])
        failures = [failure for reply in replies for failure in reply["failures"]]
        result["joined"] = len(done)
        result["join_s"] = max(done.values()) - began if len(done) == nodes else None
        result["join"] = per_node([tuple(tally) for reply in replies for tally in reply["join"]])
        if len(done) < nodes:
            result["first_failure"] = failures[0] if failures else ""
            for group in groups:
                group.send({"end": True})
            return _finish(result, server, most_files[0])

        everyone({"prepare": True})  # each group's watchdog connections made
        train_from = time.monotonic() + 1.0
        replies = everyone({"train_from": train_from, "train_until": train_from + train_s})
        result["train_handler_ops_per_s"] = sum(reply["handler_ops_per_s"] for reply in replies) / nodes
        result["train_watchdog_ops_per_s"] = sum(reply["watchdog_ops_per_s"] for reply in replies) / nodes

        victim = nodes // 2
        replies = everyone({"victim": victim, "deadline": time.monotonic() + peer_timeout_s * 3 + timeout_s})
        for group in groups:
            group.send({"end": True})
        frozen_at = next(reply["frozen_at"] for reply in replies if reply["frozen_at"] is not None)
        detected = dict(pair for reply in replies for pair in reply["detected"])
        done = dict(pair for reply in replies for pair in reply["done"])
        losses = [line for reply in replies for line in reply["losses"]]
        failures += [failure for reply in replies for failure in reply["failures"]]
        noticed = [moment for index, moment in detected.items() if index != victim]
        first = min(noticed, default=None)
        result["detect_s"] = first - frozen_at if first is not None else None
        result["all_noticed_s"] = max(noticed) - first if first is not None and len(noticed) == nodes - 1 else None
        result["first_loss"] = losses[0] if losses else ""
        result["rejoined"] = len(done)
        result["not_rejoined"] = [f"{i}{'' if i in detected or i == victim else ' (no loss noticed)'}"
                                  for i in range(nodes) if i not in done]
        result["next_round_s"] = max(done.values()) - first if first is not None and len(done) == nodes else None
        result["rejoin"] = per_node([tuple(tally) for reply in replies for tally in reply["rejoin"]])
        if failures:
            result["first_failure"] = failures[0]
        return _finish(result, server, most_files[0])
    finally:
        sampling.set()
        for group in groups:
            group.process.kill()


def run_workers_case(nodes: int, ranks_per_node: int, timeout_s: float) -> dict[str, Any]:
    """The workers' side of a round: every rank opens its own client of the workers' store (as
    ``init_process_group`` does, to the store global rank 0 or its agent serves) and meets the
    others there once. Connections come from 16 threads at a time, as ranks start on many hosts."""
    import concurrent.futures
    import torch.distributed as dist

    raise_open_files_limit()
    ranks = nodes * ranks_per_node
    server, port = start_store_server()
    timeout = datetime.timedelta(seconds=timeout_s)

    def rank(_: int) -> Any:
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        if client.add("arrived", 1) == ranks:
            client.set("all", "")
        return client

    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        clients = list(pool.map(rank, range(ranks)))
    connected = time.monotonic() - began
    clients[0].wait(["all"])
    result = {"nodes": nodes, "ranks": ranks, "connect_s": connected, "met_s": time.monotonic() - began,
              "store_open_files": open_files(server.pid), "store_cpu_s": cpu_seconds(server.pid)}
    server.kill()
    server.wait()
    return result


def _finish(result: dict[str, Any], server: subprocess.Popen[str], most_files: int) -> dict[str, Any]:
    result["store_cpu_s"] = cpu_seconds(server.pid)
    result["store_open_files"] = most_files
    server.kill()
    server.wait()
    return result


def shown(seconds: float | None, width: int = 6) -> str:
    return f"{seconds:{width}.1f} s" if seconds is not None else f"{'-':>{width}}  "


def line(result: dict[str, Any]) -> str:
    nodes, join = result["nodes"], result["join"]
    if result.get("join_s") is None:
        joined = f"{result.get('joined', 0)} of {nodes} joined in the time"
        return f"{nodes:>6} {result['handler']:>8}  {joined}; ops/node {join['ops_mean']:.0f} (most " \
               f"{join['ops_max']}), {join['kb_mean']:.0f} KB; store CPU {result['store_cpu_s']:.1f} s" \
               f"{'; ' + result['first_failure'] if result.get('first_failure') else ''}"
    rejoin = result["rejoin"]
    return (f"{nodes:>6} {result['handler']:>8}  join {shown(result['join_s'])}, ops/node {join['ops_mean']:6.1f} "
            f"(most {join['ops_max']:4d}), {join['kb_mean']:8.1f} KB | training: handler "
            f"{result['train_handler_ops_per_s']:5.2f}, watchdog {result['train_watchdog_ops_per_s']:5.2f} ops/node/s"
            f" | loss: detected {shown(result['detect_s'])} (all survivors {shown(result['all_noticed_s'], 4)} "
            f"later), next round {shown(result['next_round_s'])} later, "
            f"ops/node {rejoin['ops_mean']:6.1f} (most {rejoin['ops_max']:4d}), {rejoin['kb_mean']:8.1f} KB"
            f" | store CPU {result['store_cpu_s']:6.1f} s, {result['store_open_files']} open files")


def workers_line(count: int, args: argparse.Namespace, scratch: Path) -> bool:
    """Run and print the workers' store case for ``count`` nodes; whether it finished."""
    command, _ = named_loopback([sys.executable, __file__, "--workers-case", str(count), str(args.ranks_per_node),
                                 "--timeout", str(args.timeout)], scratch)
    try:
        finished = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout + 120)
        result = json.loads(finished.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as error:
        print(f"{count:>6} {'workers':>8}  the case did not finish: {error}", flush=True)
        return False
    print(f"{count:>6} {'workers':>8}  {result['ranks']} ranks ({args.ranks_per_node} per node) connected to the "
          f"workers' store in {result['connect_s']:.1f} s, met in {result['met_s']:.1f} s; store CPU "
          f"{result['store_cpu_s']:.1f} s, {result['store_open_files']} open files", flush=True)
    return True


def named_loopback(command: list[str], scratch: Path) -> tuple[list[str], str]:
    """``command`` run where a loopback peer's name is in /etc/hosts (see the docstring), and how."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return command, "loopback peers are looked up in DNS (not root): a dropped query stalls the store 5 s"
    hosts = scratch / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + "\n::ffff:127.0.0.1 localhost\n")
    # The paths travel as arguments, never inside the script.
    return (["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *command],
            "loopback peers named in a private /etc/hosts (no DNS queries)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="8,64,256,1024")
    parser.add_argument("--handlers", default=",".join(HANDLERS))
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a join or a new round may take")
    parser.add_argument("--train-s", type=float, default=60.0)
    parser.add_argument("--peer-timeout", type=float, default=10.0)
    parser.add_argument("--ranks-per-node", type=int, default=8,
                        help="the workers' store: N x this many ranks connect and meet once (0: not measured)")
    parser.add_argument("--processes", type=int, default=8,
                        help="the processes a case's nodes run in (at most one per 16 nodes)")
    parser.add_argument("--case", nargs=2, metavar=("HANDLER", "NODES"), help=argparse.SUPPRESS)
    parser.add_argument("--group", nargs=5, metavar=("HANDLER", "NODES", "FIRST", "END", "PORT"), help=argparse.SUPPRESS)
    parser.add_argument("--workers-case", nargs=2, type=int, metavar=("NODES", "RANKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workers_case:
        nodes, ranks_per_node = args.workers_case
        print(json.dumps(run_workers_case(nodes, ranks_per_node, args.timeout)), flush=True)
        os._exit(0)
    if args.group:
        kind, *numbers = args.group
        nodes, first, end, port = map(int, numbers)
        run_group(kind, nodes, first, end, port, args.timeout, args.peer_timeout)
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.timeout, args.train_s, args.peer_timeout,
                                  args.processes)), flush=True)
        os._exit(0)  # threads still waiting on a store that is gone do not hold the process
    try:
        counts = [int(count) for count in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes {args.nodes!r}: expected numbers of nodes, e.g. 8,64,256,1024")
    kinds = args.handlers.split(",")
    unknown = [kind for kind in kinds if kind not in HANDLERS]
    if args.processes < 1:
        parser.error(f"--processes {args.processes}: expected 1 or more")
    if unknown or any(count < 2 for count in counts):
        parser.error(f"--handlers {args.handlers!r} / --nodes {args.nodes!r}: handlers are {', '.join(HANDLERS)}; "
                     "at least 2 nodes")
    before, after = raise_open_files_limit()
    scratch = Path(tempfile.mkdtemp(prefix="rendezvous-scale-"))
    _, names = named_loopback([], scratch)
    print(f"rendezvous_scale: N nodes as threads of up to {args.processes} processes (one per 16 nodes at most), "
          f"each with its own TCPStore client (two more for the watchdog); one store server process; peer timeout {args.peer_timeout:g} s, training {args.train_s:g} s; "
          f"open files {before} -> {after}; {names}", flush=True)
    times: dict[tuple[str, int], float | None] = {}
    failed = 0
    for count in counts:
        for kind in kinds:
            limit = args.timeout * 2 + args.peer_timeout * 3 + args.train_s + 120
            try:
                command, _ = named_loopback(
                    [sys.executable, __file__, "--case", kind, str(count), "--timeout", str(args.timeout),
                     "--train-s", str(args.train_s), "--peer-timeout", str(args.peer_timeout), "--processes",
                     str(args.processes)], scratch)
                finished = subprocess.run(command, capture_output=True, text=True, timeout=limit)
                result = json.loads(finished.stdout.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as error:
                print(f"{count:>6} {kind:>8}  the case did not finish: {error}", flush=True)
                failed += 1
                continue
            times[kind, count] = result.get("join_s")
            print(line(result), flush=True)
        if args.ranks_per_node > 0:
            failed += not workers_line(count, args, scratch)
        torchs = times.get(("torch", count))
        for kind in kinds:
            ours = times.get((kind, count))
            if kind != "torch" and ours is not None and torchs:
                print(f"{'':>16}join ratio {kind}/torch {ours / torchs:.2f}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

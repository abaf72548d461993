"""A node that freezes costs seconds: two launchers on this host, one frozen for real (SIGSTOP of
every process of its session, as a hung host looks), the other watched until it acts.

The job (tests/conformance/jobs/checkpointed.py) checkpoints every step, so its history shows
every step that counted and the world size it ran at. A launcher killed with SIGKILL takes its
workers with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_faults import _history, _wait_for_step
from tests.helpers import alive, free_port
from tests.integration.launcher_helpers import LAUNCHER, clean_env, run_launcher

CHECKPOINTED = str(Path(__file__).parents[1] / "conformance" / "jobs" / "checkpointed.py")
TIMEOUT_S = 5  # the peer timeout these tests give: a loss is noticed within about 6 s


def _children() -> dict[int, list[int]]:
    """Every live process's children, read from /proc (frozen ones included)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


class Node:
    """One launcher in a session of its own, as one host of a job."""

    def __init__(self, directory: Path, port: int, *, host: bool, nnodes: str, max_restarts: int,
                 steps: int, step_s: float = 0.25, extra: tuple[str, ...] = ()) -> None:
        self.log = directory / f"node-{'host' if host else 'peer'}-{time.monotonic_ns()}.log"
        args = [
            *LAUNCHER, "--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "watched", "--max-restarts", str(max_restarts),
            "--peer-timeout", str(TIMEOUT_S), *extra, CHECKPOINTED, str(directory), str(steps), str(step_s),
        ]
        env = clean_env(TORCHX_EXT_RDZV_IS_HOST="1" if host else "0")
        self._seen: set[int] = set()
        with self.log.open("w") as out:
            self.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def freeze(self) -> None:
        for pid in self.left():
            os.kill(pid, signal.SIGSTOP)

    def kill(self) -> None:
        """Kill every process of the node, frozen or not, and reap the launcher."""
        for pid in self.left():
            os.kill(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGCONT)
        self.process.wait(timeout=10)

    def left(self) -> list[int]:
        """The launcher and every process it started that still runs (an orphan included, once
        seen here: a worker left behind is reparented away from the launcher)."""
        children, pending = _children(), [self.process.pid]
        while pending:
            pid = pending.pop()
            self._seen.add(pid)
            pending += children.get(pid, [])
        return sorted(pid for pid in self._seen if alive(pid))

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def nodes() -> Any:
    started: list[Node] = []
    yield started
    for node in started:
        if node.process.poll() is None or node.left():
            node.kill()


def _exit_of(node: Node, timeout_s: float) -> tuple[int, float]:
    started = time.monotonic()
    code = node.process.wait(timeout=timeout_s)
    return code, time.monotonic() - started


def _every_step_once(directory: Path, steps: int) -> list[list[Any]]:
    history = _history(directory)
    assert [entry[0] for entry in history] == list(range(steps)), history
    return history


def _one_frozen(tmp_path: Path, nodes: list[Node], max_restarts: int, frozen: str) -> tuple[Node, Node, int]:
    """(survivor, frozen node, port) once the survivor has exited 1 within 3 timeouts of the
    freeze of ``frozen`` ("host": the store's, or "peer")."""
    port = free_port()
    host = Node(tmp_path, port, host=True, nnodes="2", max_restarts=max_restarts, steps=400)
    peer = Node(tmp_path, port, host=False, nnodes="2", max_restarts=max_restarts, steps=400)
    nodes += [host, peer]
    survivor, victim = (peer, host) if frozen == "host" else (host, peer)
    _wait_for_step(tmp_path, 3)
    assert len(survivor.left()) >= 2  # its workers seen now: once it has exited they are orphans
    victim.freeze()
    code, waited = _exit_of(survivor, timeout_s=60)
    assert code == 1, survivor.output()[-2000:]
    assert waited < 3 * TIMEOUT_S, waited
    return survivor, victim, port


def test_a_frozen_peer_ends_a_job_without_restarts_in_seconds_naming_it(tmp_path: Path, nodes: list[Node]) -> None:
    host, peer, _ = _one_frozen(tmp_path, nodes, max_restarts=0, frozen="peer")
    last = host.output().strip().splitlines()[-1]
    assert "lost node " in last and f"launcher pid {peer.process.pid}): silent for" in last, last
    assert "silent for" in last and "no restart left" in last, last
    deadline = time.monotonic() + 5
    while host.left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert host.left() == [], "a worker outlived its launcher"


def test_an_elastic_survivor_of_a_frozen_peer_carries_on_alone(tmp_path: Path, nodes: list[Node]) -> None:
    port, steps = free_port(), 40
    host = Node(tmp_path, port, host=True, nnodes="1:2", max_restarts=1, steps=steps,
                extra=("--rdzv-conf", "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=2"))
    peer = Node(tmp_path, port, host=False, nnodes="1:2", max_restarts=1, steps=steps,
                extra=("--rdzv-conf", "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=2"))
    nodes += [host, peer]
    _wait_for_step(tmp_path, 3)
    peer.freeze()
    code, _ = _exit_of(host, timeout_s=120)
    assert code == 0, host.output()[-2000:]
    worlds = [world for _, world, _ in _every_step_once(tmp_path, steps)]
    assert worlds[0] == 2 and worlds[-1] == 1, worlds


def test_a_frozen_store_host_ends_its_peer_in_seconds_naming_the_store(tmp_path: Path, nodes: list[Node]) -> None:
    peer, _, port = _one_frozen(tmp_path, nodes, max_restarts=2, frozen="host")
    assert f"lost the rendezvous store at 127.0.0.1:{port}: it has not answered for" in peer.output()
    deadline = time.monotonic() + 5
    while peer.left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert peer.left() == [], "a worker outlived its launcher"


@pytest.mark.parametrize("handler", ["arrivals", "torch"])
def test_a_killed_store_host_ends_its_peer_naming_the_store(handler: str, tmp_path: Path, nodes: list[Node]) -> None:
    # Its connections close at once: the peer says so whether a store call or the watchdog saw it first.
    port = free_port()
    host, peer = (Node(tmp_path, port, host=is_host, nnodes="2", max_restarts=2, steps=400,
                       extra=("--c10d-handler", handler)) for is_host in (True, False))
    nodes += [host, peer]
    _wait_for_step(tmp_path, 3)
    host.kill()
    code, waited = _exit_of(peer, timeout_s=60)
    assert code == 1 and waited < 3 * TIMEOUT_S, (waited, peer.output()[-2000:])
    assert f"lost the rendezvous store at 127.0.0.1:{port}: " in peer.output(), peer.output()[-2000:]


def test_a_long_step_without_collectives_is_not_a_lost_peer(tmp_path: Path, nodes: list[Node]) -> None:
    # The step sleeps two peer timeouts before its all-reduce: the agents still beat. (A frozen
    # peer's replacement resuming every step is the fault suite's, on every scheduler.)
    port = free_port()
    host = Node(tmp_path, port, host=True, nnodes="2", max_restarts=0, steps=1, step_s=2 * TIMEOUT_S)
    peer = Node(tmp_path, port, host=False, nnodes="2", max_restarts=0, steps=1, step_s=2 * TIMEOUT_S)
    nodes += [host, peer]
    assert _exit_of(host, timeout_s=120)[0] == 0, host.output()[-2000:]
    assert _exit_of(peer, timeout_s=30)[0] == 0, peer.output()[-2000:]
    assert "lost" not in host.output() + peer.output()


@pytest.mark.parametrize("start", ["preloaded", "fresh"])
def test_workers_die_with_a_launcher_killed_by_sigkill(start: str, tmp_path: Path, nodes: list[Node]) -> None:
    node = Node(tmp_path, free_port(), host=True, nnodes="1", max_restarts=0, steps=400,
                extra=("--worker-start", start))
    nodes.append(node)
    _wait_for_step(tmp_path, 2)
    assert len(node.left()) >= 2  # the launcher and its worker at least
    node.process.send_signal(signal.SIGKILL)
    node.process.wait(timeout=10)
    deadline = time.monotonic() + 3
    while node.left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node.left() == [], f"still running 3 s after the launcher's SIGKILL: {node.left()}"


@pytest.mark.parametrize(
    "args, named",
    [
        (["--peer-timeout", "soon"], "--peer-timeout 'soon'"),
        (["--peer-timeout", "0.5"], "--peer-timeout '0.5'"),
        (["--rdzv-conf", "peer_timeout=-3"], "--rdzv-conf peer_timeout '-3'"),
    ],
)
def test_a_bad_peer_timeout_is_one_line_before_anything_starts(args: list[str], named: str, tmp_path: Path) -> None:
    result = run_launcher(["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", *args, CHECKPOINTED,
                           str(tmp_path), "1", "0"])
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error == f"error: invalid {named}: expected seconds from 1 to 86400 (a peer silent that long is lost), or 0 for no watchdog"
    assert not (tmp_path / "checkpoint.json").exists()

"""scripts/bench/rendezvous_scale.py at a small N, as a smoke test (the bench itself measures up
to 1,024 nodes, far beyond a CI run): every handler forms a round of every node, notices a lost one
and forms the next round with its replacement, and the workers' ranks all reach their store."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "rendezvous_scale.py"


def test_every_handler_joins_loses_a_node_and_forms_the_next_round() -> None:
    result = subprocess.run([sys.executable, str(BENCH), "--nodes", "8", "--train-s", "2", "--peer-timeout", "2",
                             "--timeout", "60", "--ranks-per-node", "4"], capture_output=True, text=True, timeout=400)

    assert result.returncode == 0, result.stdout + result.stderr
    for handler in ("torch", "ours", "arrivals"):
        line = next(text for text in result.stdout.splitlines() if re.match(rf"\s+8\s+{handler}\s", text))
        # Every figure came out: a join, a detected loss, a next round (none is "-").
        assert re.search(r"join +[\d.]+ s, ops/node", line), line
        assert re.search(r"detected +[\d.]+ s \(all survivors +[\d.]+ s later\), next round +[\d.]+ s later", line), line
    assert "join ratio ours/torch" in result.stdout and "join ratio arrivals/torch" in result.stdout
    assert re.search(r"\s+8\s+workers\s+32 ranks \(4 per node\) connected", result.stdout), result.stdout


def test_nodes_in_two_processes_join_lose_a_node_and_form_the_next_round_together() -> None:
    # 32 nodes in 2 processes: the lost node is in the second, the replies of both are one case.
    result = subprocess.run([sys.executable, str(BENCH), "--nodes", "32", "--handlers", "arrivals", "--processes", "2",
                             "--train-s", "2", "--peer-timeout", "2", "--timeout", "60", "--ranks-per-node", "0"],
                            capture_output=True, text=True, timeout=400)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to 2 processes" in result.stdout
    line = next(text for text in result.stdout.splitlines() if re.match(r"\s+32\s+arrivals\s", text))
    assert re.search(r"join +[\d.]+ s, ops/node", line), line
    assert re.search(r"detected +[\d.]+ s \(all survivors +[\d.]+ s later\), next round +[\d.]+ s later", line), line


STORE_SIZE = BENCH.parent / "rendezvous_store_size.py"


def test_the_store_size_bench_finds_both_handlers_within_their_bound_after_restarts() -> None:
    result = subprocess.run([sys.executable, str(STORE_SIZE), "--nodes", "4", "--rounds", "8", "--handlers",
                             "arrivals,torch"], capture_output=True, text=True, timeout=300)

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    for handler in ("arrivals", "torch"):
        line = next(text for text in result.stdout.splitlines() if text.strip().startswith(handler))
        assert re.search(r"round 8: \d+ \([\d.]+ N\).*within the bound", line), line

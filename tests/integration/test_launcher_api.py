"""torchx_ext.launcher.launch for callables, under every start method, as a user script runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.integration.launcher_helpers import JOBS, clean_env
from torchx_ext.numa.cpulist import format_cpulist

API_JOB = str(JOBS / "api_job.py")


def run_api_job(*args: str, parallel: bool = False) -> dict[str, Any]:
    env = clean_env(TORCH_MP_PARALLEL_START="1" if parallel else "0")
    result = subprocess.run([sys.executable, API_JOB, *args], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    document: dict[str, Any] = json.loads(lines[-2] if "parent_after" in lines[-1] else lines[-1])
    if "parent_after" in lines[-1]:
        # The launching thread is back on all its CPUs once the job is over.
        assert json.loads(lines[-1])["parent_after"] == sorted(os.sched_getaffinity(0))
    return document


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
@pytest.mark.parametrize("start_method", ["spawn", "fork", "forkserver"])
def test_callable_is_bound_before_it_runs(start_method: str, parallel: bool, two_cpus: list[int]) -> None:
    results = run_api_job(start_method, "exclusive", parallel=parallel)
    assert sorted(results) == ["0", "1"]
    firsts = [results[rank]["first_affinity"] for rank in ("0", "1")]
    assert all(len(first) == 1 for first in firsts) and firsts[0] != firsts[1]
    for rank in ("0", "1"):
        value = results[rank]
        assert value["thread_affinity"] == value["first_affinity"]
        assert value["torchx_ext_cpus"] == str(value["first_affinity"][0])
        assert value["omp_num_threads"] == "1" and value["torch_threads"] == 1
        assert value["sum"] == 3.0
        # Arguments are not passed through torchelastic's ${local_rank} substitution.
        assert value["tag"] == "a $x $$ ${local_rank}"
    if start_method == "spawn":
        # A spawn child re-imports __main__ before anything else: that ran bound too. (A fork
        # child runs nothing again; a forkserver child's __main__ came from the server.)
        assert [results[rank]["import_affinity"] for rank in ("0", "1")] == firsts


def test_none_keeps_the_parents_cpus_for_callables() -> None:
    results = run_api_job("spawn", "none")
    mine = sorted(os.sched_getaffinity(0))
    assert all(value["first_affinity"] == mine for value in results.values())
    assert all(value["torchx_ext_cpus"] == format_cpulist(mine) for value in results.values())


def test_worker_exception_names_the_rank_and_its_traceback() -> None:
    failure = run_api_job("spawn", "exclusive", "fail")
    assert failure["failed_rank"] == 1 and failure["exitcode"] == 1
    assert "ValueError: rank one is broken" in failure["traceback"]
    assert "fail_on_rank_one" in failure["traceback"]


def test_unknown_mode_is_refused_before_any_worker_starts() -> None:
    assert run_api_job("spawn", "numa") == {
        "error": "unknown --numa-binding 'numa': valid values are none, auto, node, socket, exclusive, core-complex"
    }

"""torchx_ext.launcher.launch for callables, under every start method, as a user script runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port
from tests.integration.launcher_helpers import JOBS, clean_env, last_json_line, run_caller
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.launcher import launch
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


# A user's script that launches an all-reduce with the rendezvous or log settings it is given.
ALL_REDUCE_CALLER = """
import json
import os
import sys

from torchx_ext.launcher import launch


def all_reduce_rank(message):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    print(f"{message} from rank {os.environ['RANK']}", flush=True)
    return value.item()


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    results = launch(all_reduce_rank, "hello", nproc_per_node=2, numa_binding="none", **settings)
    print(json.dumps(results))
"""


def test_static_rendezvous_takes_this_nodes_rank_from_rdzv_configs(tmp_path: Path) -> None:
    settings = {"rdzv_backend": "static", "rdzv_endpoint": f"localhost:{free_port()}", "rdzv_configs": {"rank": 0}}
    result = run_caller(tmp_path, ALL_REDUCE_CALLER, json.dumps(settings))

    assert result.returncode == 0, result.stderr[-3000:]
    assert last_json_line(result) == {"0": 3.0, "1": 3.0}


def test_redirected_worker_output_lands_in_files_under_log_dir(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = run_caller(tmp_path, ALL_REDUCE_CALLER, json.dumps({"log_dir": str(logs), "redirects": "3"}))

    assert result.returncode == 0, result.stderr[-3000:]
    assert last_json_line(result) == {"0": 3.0, "1": 3.0}
    for rank in (0, 1):
        (stdout,) = logs.glob(f"*/attempt_0/{rank}/stdout.log")
        assert stdout.read_text() == f"hello from rank {rank}\n"
    assert "hello from rank" not in result.stdout  # redirected, not teed


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"redirects": "9"}, "invalid redirects '9': expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or one"),
        ({"tee": "0:7"}, "invalid tee '0:7'"),
        ({"redirects": {0: 5}}, "invalid redirects {0: 5}"),
        ({"rdzv_backend": "static", "nnodes": 2}, "rdzv_backend 'static' with nnodes=2 needs this node's rank"),
        ({"rdzv_configs": {1: 2}}, "invalid rdzv_configs {1: 2}"),
        ({"rdzv_backend": "bogus"}, "unknown rdzv_backend 'bogus': valid values are c10d"),
        ({"max_restarts": -1}, "invalid max_restarts -1: expected an integer of at least 0"),
    ],
)
def test_bad_rendezvous_and_log_settings_are_refused_before_anything_starts(
    settings: dict[str, Any], message: str, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    with pytest.raises(InvalidArgumentError) as refused:
        launch(print, nproc_per_node=2, log_dir=logs, **settings)
    assert str(refused.value).startswith(message)
    assert not logs.exists()


def test_a_log_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "logs"
    file.write_text("")
    with pytest.raises(InvalidArgumentError, match="invalid log_dir .*: it is a file; expected a directory"):
        launch(print, nproc_per_node=2, log_dir=file)


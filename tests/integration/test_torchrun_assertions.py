"""torch's own tests of torchrun (pytorch's test/distributed/launcher/run_test.py), their cases that
go through a rendezvous, asserted of our launcher over c10d with either handler (the arrival
rendezvous, the default, and ``--c10d-handler torch``). torch runs them on etcd; c10d is the backend torchrun
users have. Each test names the torch test it follows; what they assert is what torch's assert:
every rank ran (each worker reports under its global rank) and the launcher's outcome."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import free_port
from tests.integration.launcher_helpers import LAUNCHER, REPORT, clean_env, reports, run_caller, run_launcher


HANDLERS = pytest.mark.parametrize("handler", ["torch", "arrivals"])


def _c10d(run_id: str, port: int, handler: str) -> list[str]:
    return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
            "--monitor-interval", "1", "--c10d-handler", handler]


@HANDLERS
def test_launch_elastic_one_node_of_one_to_two_runs_after_the_last_call(handler: str, tmp_path: Path) -> None:
    # run_test.py: test_launch_elastic (MIN:MAX 1:2, one node started: its ranks run alone).
    result = run_launcher(["--nnodes", "1:2", "--nproc-per-node", "2", *_c10d("elastic", free_port(), handler),
                           "--rdzv-conf", "last_call_timeout=1", REPORT, str(tmp_path)], timeout=120)

    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(report["rank"] for report in reports(tmp_path)) == [0, 1]
    assert {report["sum"] for report in reports(tmp_path)} == {3.0}  # 1 + 2: a world of 2


@HANDLERS
def test_launch_elastic_multiple_agents_form_one_world(handler: str, tmp_path: Path) -> None:
    # run_test.py: test_launch_elastic_multiple_agents (1:2, both nodes started: one world of 2 x nproc).
    port = free_port()
    argv = [*LAUNCHER, "--nnodes", "1:2", "--nproc-per-node", "2", *_c10d("agents", port, handler), REPORT, str(tmp_path)]
    launchers = [subprocess.Popen(argv, env=clean_env(TORCHX_EXT_RDZV_IS_HOST="1" if index == 0 else "0"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for index in range(2)]
    outputs = [launcher.communicate(timeout=120)[0] for launcher in launchers]

    assert [launcher.returncode for launcher in launchers] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    assert sorted(report["rank"] for report in reports(tmp_path)) == [0, 1, 2, 3]
    assert {report["sum"] for report in reports(tmp_path)} == {10.0}  # 1 + 2 + 3 + 4


# run_test.py's test_launch_elastic_multiple_agents as torch runs it: the second agent is launch.main
# in a multiprocessing.Process, the first in the test's own process. A thread of ours still in a
# store call as a process finalizes aborts it (SIGABRT, "terminate called without an active
# exception"): now and then, so the case runs a few times (TORCHX_EXT_AGENT_REPEATS; 20 by hand).
IN_PROCESS_AGENTS = """
import multiprocessing
import sys

from torchx_ext.launcher.cli import main

if __name__ == "__main__":  # workers started by spawn import this module again
    child = multiprocessing.Process(target=main, args=(sys.argv[1:],))
    child.start()
    code = main(sys.argv[1:])
    child.join()
    print(code, child.exitcode, flush=True)
"""


@HANDLERS
def test_launch_elastic_multiple_agents_called_in_process_end_their_processes_cleanly(handler: str,
                                                                                       tmp_path: Path) -> None:
    for attempt in range(int(os.environ.get("TORCHX_EXT_AGENT_REPEATS", "3"))):
        out = tmp_path / str(attempt)
        out.mkdir()
        result = run_caller(tmp_path, IN_PROCESS_AGENTS, "--nnodes", "1:2", "--nproc-per-node", "2",
                            *_c10d(f"agents{attempt}", free_port(), handler), REPORT, str(out),
                            env=clean_env(), timeout=120)

        assert result.returncode == 0 and result.stdout.split()[-2:] == ["0", "0"], \
            (attempt, result.returncode, result.stdout[-500:], result.stderr[-3000:])
        assert sorted(report["rank"] for report in reports(out)) == [0, 1, 2, 3]


@HANDLERS
def test_launch_elastic_worker_raise_exception_fails_the_launch(handler: str, tmp_path: Path) -> None:
    # run_test.py: test_launch_elastic_worker_raise_exception (--max-restarts 0, a failing worker).
    result = run_launcher(["--nnodes", "1:2", "--nproc-per-node", "2", *_c10d("fails", free_port(), handler),
                           "--rdzv-conf", "last_call_timeout=1", "--max-restarts", "0", REPORT, str(tmp_path)],
                          env=clean_env(REPORT_FAIL_ALWAYS="1"), timeout=120)

    assert result.returncode == 1, result.stderr[-3000:]
    assert "rank 1 fails on purpose" in result.stderr


@HANDLERS
def test_launch_with_env_vars_reads_the_pet_variables(handler: str, tmp_path: Path) -> None:
    # run_test.py: test_launch_with_env_vars (every flag from its PET_ variable).
    env = clean_env(PET_NNODES="1", PET_NPROC_PER_NODE="2", PET_RDZV_BACKEND="c10d",
                    PET_RDZV_ENDPOINT=f"127.0.0.1:{free_port()}", PET_RDZV_ID="from-env", PET_MONITOR_INTERVAL="1",
                    PET_C10D_HANDLER=handler)
    result = run_launcher([REPORT, str(tmp_path)], env=env, timeout=120)

    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(report["rank"] for report in reports(tmp_path)) == [0, 1]


def test_launch_standalone_runs_every_rank(tmp_path: Path) -> None:
    # run_test.py: test_launch_standalone (--standalone: a c10d rendezvous on this host).
    result = run_launcher(["--standalone", "--nnodes", "1", "--nproc-per-node", "3", "--monitor-interval", "1",
                           REPORT, str(tmp_path)], timeout=120)

    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(report["rank"] for report in reports(tmp_path)) == [0, 1, 2]

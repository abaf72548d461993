"""The launcher with real torch.distributed (gloo) jobs on this machine."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import MachineRoot
from torchx_ext.launcher.open_files import open_files_ceiling
from torchx_ext.numa.cpulist import format_cpulist
from tests.helpers import alive, free_port
from tests.integration.launcher_helpers import (
    JOBS,
    LAUNCHER,
    REPORT,
    clean_env,
    reports,
    run_launcher,
    worker_pids,
)


def test_exclusive_gives_each_rank_its_own_cpu_from_the_first_line(tmp_path: Path, two_cpus: list[int]) -> None:
    result = run_launcher(["--nproc-per-node", "2", "--numa-binding", "exclusive", "--omp-threads", "auto", REPORT, str(tmp_path)])
    assert result.returncode == 0, result.stderr
    ranks = reports(tmp_path)
    assert [rank["sum"] for rank in ranks] == [3.0, 3.0]
    firsts = [rank["first_affinity"] for rank in ranks]
    assert all(len(first) == 1 for first in firsts) and firsts[0] != firsts[1]
    for rank in ranks:
        assert rank["thread_affinity"] == rank["first_affinity"]
        assert rank["torchx_ext_cpus"] == str(rank["first_affinity"][0])
        assert rank["torchx_ext_numa_node"] == "0"
        assert rank["omp_num_threads"] == "1"
    # One log line per local rank, before the workers start.
    assert "local_rank=0 cpus=" in result.stderr and "local_rank=1 cpus=" in result.stderr


def test_none_keeps_the_parents_cpus_and_says_which(tmp_path: Path, two_cpus: list[int]) -> None:
    result = run_launcher(["--nproc-per-node", "2", "--numa-binding", "none", REPORT, str(tmp_path)])
    assert result.returncode == 0, result.stderr
    for rank in reports(tmp_path):
        assert rank["first_affinity"] == two_cpus == rank["thread_affinity"]
        assert rank["torchx_ext_cpus"] == format_cpulist(two_cpus)
        assert rank["torchx_ext_numa_node"] == ""
        assert rank["omp_num_threads"] == "1"  # torchrun's default for nproc > 1
        assert rank["file"] == REPORT and os.path.isabs(rank["file"])


def test_gpu_uuids_stop_only_a_binding_that_was_asked_for(tmp_path: Path) -> None:
    uuids = clean_env(CUDA_VISIBLE_DEVICES="GPU-8f3e4c1a-0000-1111-2222-333344445555")
    unbound = run_launcher(["--nproc-per-node", "1", "--numa-binding", "auto", REPORT, str(tmp_path)], env=uuids)
    assert unbound.returncode == 0, unbound.stderr
    assert "NUMA binding off: CUDA_VISIBLE_DEVICES" in unbound.stderr
    refused = run_launcher(["--nproc-per-node", "1", "--numa-binding", "node", REPORT, str(tmp_path)], env=uuids)
    assert refused.returncode == 2 and "GPU UUID or MIG name" in refused.stderr


def test_a_workers_exception_reaches_the_launchers_own_error_file(tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    error_file.write_text('{"message": {"message": "a failure of an earlier run", "errorCode": 3}}')
    result = run_launcher(
        ["--nproc-per-node", "2", str(JOBS / "raise_job.py")], env=clean_env(TORCHELASTIC_ERROR_FILE=str(error_file))
    )
    assert result.returncode == 1
    assert "raise_job.py FAILED" in result.stderr
    assert "rank one is broken on purpose" in error_file.read_text()  # this run's, as torchrun does
    assert "earlier run" not in error_file.read_text()


def test_launcher_under_a_narrow_affinity_never_binds_outside_it(tmp_path: Path, two_cpus: list[int]) -> None:
    only = two_cpus[-1]
    result = run_launcher(
        ["--nproc-per-node", "2", "--numa-binding", "exclusive", REPORT, str(tmp_path)],
        preexec_fn=lambda: os.sched_setaffinity(0, {only}),
    )
    assert result.returncode == 0, result.stderr
    assert [rank["first_affinity"] for rank in reports(tmp_path)] == [[only], [only]]
    assert "ranks share cores" in result.stderr  # the fallback is said out loud


def test_launcher_under_taskset_never_binds_outside_its_cpu(tmp_path: Path, two_cpus: list[int]) -> None:
    taskset = shutil.which("taskset")
    if taskset is None:
        if os.environ.get("CI") == "true":
            pytest.fail("taskset (util-linux) is missing on the CI machine")
        pytest.skip("needs taskset")
    only = two_cpus[-1]
    result = subprocess.run(
        [taskset, "-c", str(only), *LAUNCHER, "--nproc-per-node", "2", "--numa-binding", "exclusive",
         REPORT, str(tmp_path)],
        capture_output=True, text=True, env=clean_env(), timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert [rank["first_affinity"] for rank in reports(tmp_path)] == [[only], [only]]


def test_script_arguments_reach_the_worker_byte_for_byte(tmp_path: Path) -> None:
    weird = ["a b", "'quoted'", '"double"', "$HOME", "$$", "${local_rank}", "`id`", "$(id)", "line\nbreak", "ünï☃", "--x=1", ""]
    result = run_launcher(["--nproc-per-node", "2", REPORT, str(tmp_path), *weird])
    assert result.returncode == 0, result.stderr
    for rank in reports(tmp_path):
        assert rank["argv"] == weird
        assert rank["argv0"] == REPORT and rank["name"] == "__main__"


def test_the_open_files_limit_is_raised_to_the_hard_one_for_the_store_and_the_workers(tmp_path: Path) -> None:
    # Node rank 0's launcher serves the rendezvous store: four connections for each node.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = open_files_ceiling()  # the hard limit, or fs.nr_open where that is unlimited
    lowered = min(256, ceiling // 2)
    script = tmp_path / "limit.py"
    script.write_text("import resource\nprint('open files', *resource.getrlimit(resource.RLIMIT_NOFILE))\n")

    result = run_launcher(["--nproc-per-node", "1", str(script)],
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard)))

    assert result.returncode == 0, result.stderr
    assert f"open files {ceiling} {hard}" in result.stdout


@pytest.mark.parametrize("entry", ["module", "no-python", "run-path"])
def test_module_no_python_and_run_path_entrypoints_are_bound(entry: str, tmp_path: Path, two_cpus: list[int]) -> None:
    target = {
        "module": ["-m", "report"],
        "no-python": ["--no-python", sys.executable, REPORT],
        "run-path": ["--run-path", REPORT],
    }[entry]
    result = run_launcher(
        ["--nproc-per-node", "2", "--numa-binding", "exclusive", *target, str(tmp_path), "x y"], cwd=str(JOBS)
    )
    assert result.returncode == 0, result.stderr
    ranks = reports(tmp_path)
    assert len(ranks) == 2 and {len(rank["first_affinity"]) for rank in ranks} == {1}
    assert ranks[0]["first_affinity"] != ranks[1]["first_affinity"]
    assert all(rank["argv"] == ["x y"] for rank in ranks)


def test_omp_threads_flag_and_user_export(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    explicit = run_launcher(["--nproc-per-node", "2", "--omp-threads", "3", REPORT, str(tmp_path / "a")])
    assert explicit.returncode == 0, explicit.stderr
    assert [rank["omp_num_threads"] for rank in reports(tmp_path / "a")] == ["3", "3"]
    exported = run_launcher(
        ["--nproc-per-node", "2", "--omp-threads", "auto", REPORT, str(tmp_path / "b")],
        env=clean_env(OMP_NUM_THREADS="5"),
    )
    assert exported.returncode == 0, exported.stderr
    assert [rank["omp_num_threads"] for rank in reports(tmp_path / "b")] == ["5", "5"]


def test_rendezvous_host_from_an_env_var(tmp_path: Path) -> None:
    port = free_port()
    result = run_launcher(
        ["--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint-env", "MY_MASTER",
         "--rdzv-port", str(port), REPORT, str(tmp_path)],
        env=clean_env(MY_MASTER=""),
    )
    assert result.returncode == 0, result.stderr
    assert [rank["sum"] for rank in reports(tmp_path)] == [3.0, 3.0]


def test_fixture_machine_plan_is_logged_in_a_dry_run(tmp_path: Path, machine_root: MachineRoot) -> None:
    result = run_launcher(
        ["--nproc-per-node", "8", "--numa-binding", "exclusive", "--numa-device-kind", "gpu",
         "--numa-sysfs-root", str(machine_root("dgx-h100")), "--numa-dry-run", REPORT, str(tmp_path)],
    )
    assert result.returncode == 0, result.stderr
    assert "dry run: not applied" in result.stderr
    assert "local_rank=0 cpus=0-13,112-125 numa_node=0 gpu=0" in result.stderr
    assert "local_rank=7 cpus=98-111,210-223 numa_node=1 gpu=7" in result.stderr
    # Not applied: the workers keep this host's CPUs.
    assert {tuple(rank["first_affinity"]) for rank in reports(tmp_path)} == {tuple(sorted(os.sched_getaffinity(0)))}


def test_another_sysfs_root_is_still_limited_to_this_process_cpus(tmp_path: Path, machine_root: MachineRoot) -> None:
    # A container reading its host's tree (say /host/sys) must stay inside its own cpuset.
    result = run_launcher(
        ["--nproc-per-node", "2", "--numa-binding", "node", "--numa-device-kind", "cpu",
         "--numa-sysfs-root", str(machine_root("dgx-h100")), REPORT, str(tmp_path)],
    )
    assert result.returncode == 0, result.stderr
    mine = set(os.sched_getaffinity(0))
    assert all(set(rank["first_affinity"]) <= mine for rank in reports(tmp_path))


def test_failed_worker_is_restarted_and_the_job_succeeds(tmp_path: Path) -> None:
    result = run_launcher(
        ["--nproc-per-node", "2", "--max-restarts", "1", REPORT, str(tmp_path)],
        env=clean_env(REPORT_FAIL_ON_FIRST_ATTEMPT="1"),
    )
    assert result.returncode == 0, result.stderr
    assert [rank["restart"] for rank in reports(tmp_path)] == [1, 1]


def test_a_restart_held_up_after_a_failure_prints_where_the_launcher_waits(tmp_path: Path) -> None:
    # Rank 1 fails; rank 0 ignores SIGTERM, so torch waits for it (30 s) before the agent restarts:
    # 10 s after the failure the launcher prints its own threads' stacks, once.
    result = run_launcher(
        ["--nproc-per-node", "2", "--max-restarts", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
         f"127.0.0.1:{free_port()}", REPORT, str(tmp_path)],
        env=clean_env(REPORT_FAIL_ON_FIRST_ATTEMPT="1", REPORT_IGNORE_SIGTERM="1"),
    )
    assert result.returncode == 0, result.stderr
    told = result.stderr.count("failed 10 s ago and the launcher has not rendezvoused again; its threads' stacks:")
    assert told == 1, result.stderr
    stacks = result.stderr.split("its threads' stacks:", 1)[1]
    assert "thread MainThread:" in stacks and "_monitor_workers" in stacks, stacks  # the agent, joining its workers


def test_worker_failing_every_time_fails_the_job_with_its_error(tmp_path: Path) -> None:
    result = run_launcher(
        ["--nproc-per-node", "2", "--max-restarts", "1", REPORT, str(tmp_path)],
        env=clean_env(REPORT_FAIL_ALWAYS="1"),
    )
    assert result.returncode == 1
    assert "rank      : 1" in result.stderr or "rank: 1" in result.stderr
    assert "exitcode  : 7" in result.stderr or "exitcode: 7" in result.stderr
    assert len([pid for pid in worker_pids(tmp_path)]) == 4  # two attempts of two ranks


@pytest.mark.parametrize("worker", ["plain", "ignores-sigterm"])
def test_sigterm_ends_every_worker_within_ten_seconds(worker: str, tmp_path: Path) -> None:
    launcher = subprocess.Popen(
        [*LAUNCHER, "--nproc-per-node", "2", REPORT, str(tmp_path)],
        env=clean_env(REPORT_SLEEP="300", REPORT_IGNORE_SIGTERM="1" if worker == "ignores-sigterm" else "0"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while len(reports(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(reports(tmp_path)) == 2, "workers did not start"
        pids = worker_pids(tmp_path)
        launcher.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        launcher.wait(timeout=10)
        while any(alive(pid) for pid in pids) and time.monotonic() - stopped < 10:
            time.sleep(0.05)
        assert not [pid for pid in pids if alive(pid)]
        assert time.monotonic() - stopped < 10
    finally:
        launcher.kill()
        launcher.wait()


def test_rendezvous_that_cannot_complete_ends_with_a_clear_message(tmp_path: Path) -> None:
    start = time.monotonic()
    result = run_launcher(
        ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
         f"localhost:{free_port()}", "--rdzv-id", "lonely", "--rdzv-conf", "join_timeout=5", REPORT, str(tmp_path)],
        timeout=90,
    )
    assert result.returncode == 1
    assert "error: rendezvous 'lonely'" in result.stderr and "need 2 nodes" in result.stderr
    assert time.monotonic() - start < 60
    assert worker_pids(tmp_path) == []


def test_a_store_nobody_serves_ends_the_launcher_in_one_line_within_its_connect_timeout(tmp_path: Path) -> None:
    # Told not to host the store (as local_cwd and Slurm tell all but one), at a port where nothing
    # listens: torch's client would wait its timeout twice, in silence, then print a C++ stack.
    error_file = tmp_path / "error.json"
    port = free_port()
    start = time.monotonic()
    result = run_launcher(
        ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
         "--rdzv-id", "unserved", "--rdzv-conf", "read_timeout=3", REPORT, str(tmp_path)],
        env=clean_env(TORCHX_EXT_RDZV_IS_HOST="0", TORCHELASTIC_ERROR_FILE=str(error_file)), timeout=90)

    line = f"cannot reach the job's rendezvous store at 127.0.0.1:{port} in 3 s: connection refused"
    assert result.returncode == 1
    assert line in result.stderr and "c10d::" not in result.stderr, result.stderr
    assert line in error_file.read_text()
    assert time.monotonic() - start < 30
    assert worker_pids(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--numa-binding", "numa"], "unknown --numa-binding 'numa': valid values are none, auto, node"),
        (["--nproc-per-node", "0"], "invalid --nproc-per-node '0'"),
        (["--nnodes", "3:2"], "invalid --nnodes '3:2'"),
        (["--omp-threads", "many"], "invalid --omp-threads 'many'"),
        (["--numa-device-kind", "tpu"], "unknown --numa-device-kind 'tpu'"),
        (["--rdzv-backend", "bogus"], "unknown --rdzv-backend 'bogus': valid values are c10d"),
        (["--c10d-handler", "fast"], "invalid --c10d-handler 'fast': expected one of arrivals, torch"),
        (["--rdzv-conf", "join_timeout=soon"], "invalid --rdzv-conf join_timeout='soon': expected a whole number"),
        (["--nproc-per-node", "3", "--numa-binding", "exclusive", "--numa-strict"], "strict NUMA binding refused"),
    ],
)
def test_bad_input_is_refused_before_any_worker_starts(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_launcher([*args, REPORT, str(tmp_path)], timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"error: {message}" in result.stderr and "Traceback" not in result.stderr
    assert worker_pids(tmp_path) == []


def test_static_rendezvous_that_cannot_complete_ends_with_a_clear_message(tmp_path: Path) -> None:
    start = time.monotonic()
    result = run_launcher(
        ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "static", "--node-rank", "0",
         "--master-port", str(free_port()), "--rdzv-conf", "timeout=5", REPORT, str(tmp_path)],
        timeout=90,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "error: rendezvous" in result.stderr and "static" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - start < 60


def test_missing_script_is_refused(tmp_path: Path) -> None:
    result = run_launcher(["--nproc-per-node", "2", str(tmp_path / "nope.py")], timeout=60)
    assert result.returncode == 2
    assert f"training script '{tmp_path / 'nope.py'}' does not exist" in result.stderr


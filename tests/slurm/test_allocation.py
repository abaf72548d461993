"""Jobs inside an allocation the user holds (``salloc``): started as its steps at once, with no
sbatch; from the allocation's own shell or with ``-cfg allocation``. What a job does there
(faults, a frozen replica, retry policies, logs, cancel) is the conformance suite's
``slurm-allocation`` case; here: the allocation's own shell, GPUs, two jobs side by side, a job
that does not fit, and the allocation ending under a job."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.jobs_api import status_until, wait, wait_for_line
from tests.fixtures.slurm_cluster import hold_allocation, slurm_leftovers
from tests.helpers import TORCHX, torchx
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.slurm.records import STATE_ROOT_ENV

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"
SLEEPER = str(REPO / "tests" / "conformance" / "jobs" / "sleeper.py")
SNAPSHOT = str(REPO / "tests" / "fixtures" / "sysfs" / "gpu-2socket-8")
SOCKET_OF_GPU = {0: 0, 1: 0, 2: 0, 3: 1, 4: 0, 5: 1, 6: 1, 7: 1}


@pytest.fixture
def job_dir(slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
    yield tmp_path / "the jobs"  # a blank in the path: the driver's script quotes it
    subprocess.run(["scancel", "--user=root", "--name=held"], capture_output=True)


def steps_of(allocation: str) -> list[str]:
    shown = subprocess.run(["squeue", "-h", "-s", "-j", allocation, "-o", "%i %j"], capture_output=True, text=True)
    return [line for line in shown.stdout.splitlines() if line.strip() and not line.split()[0].endswith(".extern")]


def test_from_the_allocations_shell_a_gpu_job_runs_as_its_steps_at_once_bound_to_its_gpus(
    job_dir: Path, tmp_path: Path
) -> None:
    # salloc runs the command in the allocation's shell (SLURM_JOB_ID set), as a user's salloc does.
    ran = subprocess.run(
        ["salloc", "--nodes=2", "--exclusive", "--gpus-per-node=h100:2", "--job-name=held", *TORCHX, "run", "-s", "slurm", "-cfg", f"job_dir={job_dir}", "--wait",
         "dist.ddp", "-j", "2x2", "--gpu", "2", "--cpu", "1", "--numa_binding", "node",
         "--env", f"PET_NUMA_SYSFS_ROOT={SNAPSHOT},PET_NUMA_DEVICE_KIND=gpu",
         "--script", str(REPO / "tests" / "slurm" / "jobs" / "gpu_rank.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=240)

    allocation = re.search(r"Granted job allocation (\d+)", ran.stderr)
    assert ran.returncode == 0 and allocation, ran.stdout + ran.stderr
    said = re.search(rf"running in allocation {allocation[1]} \(2 nodes\): no sbatch, no queue", ran.stderr)
    assert said, ran.stderr
    handle = next(line for line in ran.stdout.splitlines() if line.startswith("slurm://"))
    assert parse_app_handle(handle).app_id.startswith(f"{allocation[1]}-")
    # No job of its own: the cluster's only job since is the allocation.
    assert not [path for path in job_dir.glob("*/slurm-*.out")]
    shown = torchx("status", handle, cwd=tmp_path)
    assert "SUCCEEDED" in shown.stdout, shown.stdout + shown.stderr
    hosts = set()
    for replica in (0, 1):
        log = torchx("log", f"{handle}/gpu_rank/{replica}", cwd=tmp_path).stdout
        hosts |= set(re.findall(r"on (node[12]) \(", log))
        visible = [int(gpu) for gpu in re.findall(r"visible ([\d,]+)", log)[0].split(",")]
        planned = re.findall(r"local_rank=(\d+) cpus=\S+ numa_node=(\d+) gpu=(\d+)", log)
        # Each local rank drives the GPU Slurm gave it, planned on that GPU's NUMA node.
        assert len(visible) == 2 and sorted(int(rank) for rank, _, _ in planned) == [0, 1], log
        for rank, node, device in planned:
            assert int(device) == int(rank) and int(node) == SOCKET_OF_GPU[visible[int(rank)]], log
    assert hosts == {"node1", "node2"}


def test_two_jobs_share_an_allocation_and_neither_a_cancel_nor_the_allocations_end_leaves_anything(
    runner: Runner, job_dir: Path, tmp_path: Path
) -> None:
    allocation = hold_allocation(2)
    cfg = {"job_dir": str(job_dir), "allocation": allocation}
    first = runner.run(ddp(SLEEPER, script=SLEEPER, j="1x1", cpu=1), "slurm", cfg=cfg)
    second = runner.run(ddp(SLEEPER, script=SLEEPER, j="1x1", cpu=1), "slurm", cfg=cfg)
    for handle in (first, second):
        wait_for_line(runner, handle, "sleeper", 0, r"running rank 0", timeout_s=60)
    nodes = {status.roles[0].replicas[0].hostname for handle in (first, second)
             if (status := runner.status(handle)) is not None}
    assert nodes == {"node1", "node2"}  # side by side, a node each

    cancelled = torchx("cancel", first, cwd=tmp_path)  # another shell, another directory
    assert cancelled.returncode == 0, cancelled.stderr
    assert wait(runner, first, timeout_s=30) == AppState.CANCELLED
    assert slurm_leftovers(parse_app_handle(first).app_id) == []
    running = runner.status(second)
    assert running is not None and running.state == AppState.RUNNING, running
    held = subprocess.run(["squeue", "-h", "-j", allocation, "-o", "%T"], capture_output=True, text=True).stdout
    assert held.strip() == "RUNNING"

    subprocess.run(["scancel", allocation], check=True)
    ended = status_until(runner, second, lambda status: status.is_terminal(), timeout_s=60)
    assert ended.state == AppState.FAILED and f"allocation {allocation} ended (CANCELLED) under the job" in ended.msg, \
        ended
    shown = torchx("status", second, cwd=tmp_path)
    assert "FAILED" in shown.stdout and f"allocation {allocation} ended" in shown.stdout, shown.stdout
    assert slurm_leftovers(parse_app_handle(second).app_id) == []


@pytest.mark.parametrize("args, allocation, named", [
    (["-j", "3x1", "--cpu", "1"], "", "the job asks 3 nodes, but allocation {id} holds 2 nodes of 2 CPUs"),
    (["-j", "1x1", "--cpu", "1", "--gpu", "16"], "", "the job asks 16 GPUs per node (train), but allocation {id} holds "
                                                  "2 nodes of 2 CPUs, 8 GPUs"),
    (["-j", "1x1"], "one", "invalid allocation 'one': expected the job id of a Slurm allocation you hold"),
    (["-j", "1x1"], "999999", "allocation 999999: Slurm does not know it"),
])
def test_a_job_the_allocation_cannot_hold_is_one_line_and_starts_nothing(
    job_dir: Path, tmp_path: Path, args: list[str], allocation: str, named: str
) -> None:
    held = hold_allocation(2)
    ran = torchx("run", "-s", "slurm", "-cfg", f"job_dir={job_dir},allocation={allocation or held}", "dist.ddp",
                 *args, "--script", str(TRAIN), cwd=tmp_path)

    errors = [line for line in ran.stderr.splitlines() if line.startswith("torchx: error")]
    assert ran.returncode != 0 and len(errors) == 1 and named.format(id=held) in errors[0], ran.stderr
    assert "Traceback" not in ran.stderr
    assert not job_dir.exists() or not list(job_dir.iterdir())
    assert steps_of(held) == []


def test_inside_an_allocation_a_job_of_its_own_is_still_one_option_away(
    runner: Runner, job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "12345")  # as in an allocation's shell
    inside = runner.dryrun(ddp(script=str(TRAIN), j="1x1"), "slurm", cfg={"job_dir": str(job_dir), "allocation": "new"})
    assert "#SBATCH --nodes=1\n" in inside.request.script and not inside.request.allocation
    with pytest.raises(InvalidArgumentError, match="allocation 12345: Slurm does not know it"):
        runner.dryrun(ddp(script=str(TRAIN), j="1x1"), "slurm", cfg={"job_dir": str(job_dir)})

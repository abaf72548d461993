"""GPU jobs on the test Slurm without GPUs: each node offers gpu:h100:8 (fake GRES on /dev/tty
device nodes, scripts/slurm_cluster.sh), laid out as tests/fixtures/sysfs/gpu-2socket-8: GPUs 0-2
and 4 next to socket 0, 3 and 5-7 next to socket 1 (PCI order is not NUMA order for 3 and 4).
Each launcher plans for that snapshot, passed as a user would (``PET_NUMA_SYSFS_ROOT``, and
``PET_NUMA_DEVICE_KIND=gpu``: this torch is a CPU build), and says so; Slurm's CUDA_VISIBLE_DEVICES decides which GPU each local rank drives."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState

from tests.conformance.jobs_api import wait
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.slurm.records import STATE_ROOT_ENV

SNAPSHOT = str(Path(__file__).parents[1] / "fixtures" / "sysfs" / "gpu-2socket-8")
GPU_RANK = str(Path(__file__).parent / "jobs" / "gpu_rank.py")
SOCKET_OF_GPU = {0: 0, 1: 0, 2: 0, 3: 1, 4: 0, 5: 1, 6: 1, 7: 1}
CPUS_OF_SOCKET = {0: "0-7,16-23", 1: "8-15,24-31"}
PLANNED = re.compile(r"local_rank=(\d+) cpus=(\S+) numa_node=(\d+) gpu=(\d+) \((\S+)\)")
# The snapshot's GPU k (CUDA's index k: PCI bus order) is at bus 0x10 + 8k.
PCI_OF_GPU = {gpu: f"0000:{0x10 + 8 * gpu:02x}:00.0" for gpu in range(8)}


@pytest.fixture
def cfg(slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
    yield {"job_dir": str(tmp_path / "jobs")}
    subprocess.run(["scancel", "--user=root", "--name=gpu-holder"], capture_output=True)


def gpu_job(j: str, gpu: int) -> object:
    # GPU ranks, though this torch is a CPU build (a CUDA build plans them by itself).
    return ddp(script=GPU_RANK, j=j, gpu=gpu, cpu=1, memMB=500, numa_binding="node",
               env={"PET_NUMA_SYSFS_ROOT": SNAPSHOT, "PET_NUMA_DEVICE_KIND": "gpu"})


def plans(runner: Runner, handle: str, replica: int) -> tuple[str, dict[int, tuple[str, int, int, str]]]:
    """The replica's log, and its launcher's plan: local rank -> (cpus, NUMA node, device index
    among the visible GPUs, the GPU's PCI address)."""
    log = "".join(runner.log_lines(handle, "gpu_rank", replica))
    return log, {int(rank): (cpus, int(node), int(device), pci)
                 for rank, cpus, node, device, pci in PLANNED.findall(log)}


def test_2x8_every_rank_drives_its_gpu_from_the_cpus_of_its_socket(runner: Runner, cfg: dict[str, str]) -> None:
    handle = runner.run(gpu_job("2x8", 8), "slurm", cfg=cfg)
    assert wait(runner, handle, timeout_s=240) == AppState.SUCCEEDED

    for replica in (0, 1):
        log, plan = plans(runner, handle, replica)
        assert "planned for a snapshot of gpu-2socket-8" in log, log[-3000:]
        assert plan == {rank: (CPUS_OF_SOCKET[SOCKET_OF_GPU[rank]], SOCKET_OF_GPU[rank], rank, PCI_OF_GPU[rank])
                        for rank in range(8)}, log
        assert "visible 0,1,2,3,4,5,6,7" in log  # the whole node: no per-task isolation
        # Bound within the CPUs that exist here, which Slurm gave the task.
        for affinity in re.findall(r"affinity \[([\d, ]+)\]", log):
            assert {int(cpu) for cpu in affinity.split(", ")} <= {0, 1}, affinity
    status = runner.status(handle)
    assert status is not None and sorted(r.hostname for r in status.roles[0].replicas) == ["node1", "node2"]
    # Every GPU of its node: each replica got the whole node.
    script = next(Path(cfg["job_dir"]).glob("*/batch.sh")).read_text()
    assert "#SBATCH --exclusive\n" in script and "#SBATCH --gpus-per-node=8\n" in script


def test_2_of_8_gpus_while_socket_0s_are_taken_are_planned_on_socket_1(runner: Runner, cfg: dict[str, str]) -> None:
    # Another job holds four GPUs of node1: Slurm gives it those next to socket 0 (0-2 and 4).
    holder = subprocess.run(["sbatch", "--parsable", "-J", "gpu-holder", "-w", "node1", "--mem=100M",
                             "--gpus-per-node=4", "--wrap", "sleep 300"], capture_output=True, text=True, check=True)
    shown = ""
    for _ in range(100):
        shown = subprocess.run(["squeue", "-h", "-j", holder.stdout.strip(), "-o", "%T"], capture_output=True,
                               text=True).stdout.strip()
        if shown == "RUNNING":
            break
        subprocess.run(["sleep", "0.2"])
    assert shown == "RUNNING", shown

    handle = runner.run(gpu_job("1x2", 2), "slurm", cfg={**cfg, "nodelist": "node1"})
    assert wait(runner, handle, timeout_s=180) == AppState.SUCCEEDED

    log, plan = plans(runner, handle, 0)
    visible = [int(gpu) for gpu in re.findall(r"visible ([\d,]+)", log)[0].split(",")]
    assert len(visible) == 2 and {SOCKET_OF_GPU[gpu] for gpu in visible} == {1}, log
    # Local rank r drives the r-th GPU Slurm gave (device r), planned on that GPU's socket.
    assert plan == {rank: (CPUS_OF_SOCKET[1], 1, rank, PCI_OF_GPU[visible[rank]]) for rank in range(2)}, log
    assert "affinity [1]" in log  # the CPU Slurm gave with those GPUs


def test_more_gpus_than_a_node_has_is_one_line_before_anything_is_queued(runner: Runner, cfg: dict[str, str]) -> None:
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
    with pytest.raises(InvalidArgumentError) as refused:
        runner.run(gpu_job("1x2", 16), "slurm", cfg=cfg)
    message = str(refused.value)
    assert "\n" not in message
    assert "asks 16 GPUs per node, but no node of the default partition has more than 8" in message, message
    after = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
    assert set(after) - set(before) == set()  # (a job of an earlier test may have left meanwhile)


def test_a_gpu_type_the_cluster_lacks_is_slurms_reason_in_one_line(runner: Runner, cfg: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        runner.run(gpu_job("1x2", 2), "slurm", cfg={**cfg, "gpu_type": "a100"})
    message = str(refused.value)
    assert "\n" not in message and "sbatch refused the job" in message, message
    assert "with --gpus-per-node=a100:2: sbatch: error: Batch job submission failed: Requested node configuration is " \
           "not available" in message, message


def test_a_named_hosts_gpu_model_is_asked_as_the_gres_type_only_where_the_cluster_names_it_so(
    runner: Runner, cfg: dict[str, str]
) -> None:
    typed = runner.dryrun(ddp(script=GPU_RANK, j="1x8", h="dgx_h100"), "slurm", cfg=cfg)
    assert "#SBATCH --gpus-per-node=h100:8\n" in typed.request.script  # the test cluster's GPUs are gpu:h100
    assert "#SBATCH --exclusive\n" in typed.request.script  # every GPU of a node
    untyped = runner.dryrun(ddp(script=GPU_RANK, j="1x8", h="aws_p4d.24xlarge"), "slurm", cfg=cfg)
    assert "#SBATCH --gpus-per-node=8\n" in untyped.request.script  # A100s: no node says a100

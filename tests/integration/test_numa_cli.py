"""``python -m torchx_ext.numa``: the scripted contract and the tables, as a user runs them."""

from __future__ import annotations

import json
import socket
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MachineRoot


def numa_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {key: value for key, value in os.environ.items() if not key.endswith("VISIBLE_DEVICES")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "torchx_ext.numa", *args], capture_output=True, text=True, env=full_env, timeout=60
    )


def test_plan_json_contract(machine_root: MachineRoot) -> None:
    result = numa_cli(
        "plan", "--nproc-per-node", "2", "--mode", "exclusive",
        "--sysfs-root", str(machine_root("dgx-h100")), "--allowed-cpus", "all", "--visible-devices", "4,5", "--json",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["mode"] == "exclusive" and document["warnings"] == []
    assert [
        {key: rank[key] for key in ("local_rank", "numa_node", "gpu", "threads")} for rank in document["ranks"]
    ] == [
        {"local_rank": 0, "numa_node": 1, "gpu": 0, "threads": 28},
        {"local_rank": 1, "numa_node": 1, "gpu": 1, "threads": 28},
    ]
    assert document["ranks"][0]["cpus"] == list(range(56, 84)) + list(range(168, 196))


def test_visible_devices_default_to_cuda_visible_devices(machine_root: MachineRoot) -> None:
    result = numa_cli(
        "plan", "--nproc-per-node", "1", "--mode", "node", "--sysfs-root", str(machine_root("dgx-h100")),
        "--allowed-cpus", "all", "--json",
        env={"CUDA_VISIBLE_DEVICES": "7"},
    )
    assert json.loads(result.stdout)["ranks"][0]["numa_node"] == 1


def test_plan_table_with_warnings(machine_root: MachineRoot) -> None:
    result = numa_cli(
        "plan", "--nproc-per-node", "4", "--mode", "exclusive", "--sysfs-root", str(machine_root("dgx-h100")),
        "--allowed-cpus", "0-1,112-113",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "mode: exclusive; device kind: gpu; 4 local ranks"
    assert lines[1].split() == ["local_rank", "gpu", "numa_node", "threads", "cpus"]
    assert lines[2].split()[-1] == "0,112"
    assert lines[-1] == "warning: NUMA node 0 has 2 allowed physical cores for 4 ranks; ranks share cores"


def test_strict_refuses_the_fallback(machine_root: MachineRoot) -> None:
    result = numa_cli(
        "plan", "--nproc-per-node", "4", "--mode", "exclusive", "--sysfs-root", str(machine_root("dgx-h100")),
        "--allowed-cpus", "0-1,112-113", "--strict",
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: strict NUMA binding refused")


def test_plan_on_this_machine() -> None:
    result = numa_cli("plan", "--nproc-per-node", "2", "--mode", "exclusive", "--json")
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    allowed = os.sched_getaffinity(0)
    assert all(set(rank["cpus"]) <= allowed for rank in ranks)
    if len(allowed) >= 2:
        assert not set(ranks[0]["cpus"]) & set(ranks[1]["cpus"])


def test_show_names_nodes_gpus_and_memory_only_nodes(machine_root: MachineRoot) -> None:
    result = numa_cli("show", "--sysfs-root", str(machine_root("gb200")), "--allowed-cpus", "all")
    assert result.returncode == 0, result.stderr
    assert "none online (memory only?)" in result.stdout
    assert "GPUs (PCI order)" in result.stdout and result.stdout.count("nvidia") == 4
    shown = numa_cli("show", "--sysfs-root", str(machine_root("gb200")), "--allowed-cpus", "all", "--json")
    document = json.loads(shown.stdout)
    assert [node["has_online_cpus"] for node in document["nodes"]] == [True, True, False, False, False, False]


def test_a_container_cpuset_limits_every_plan(machine_root: MachineRoot) -> None:
    """The process's affinity (a cpuset, here one CPU) bounds the plan on any sysfs root."""
    cpu = max(os.sched_getaffinity(0))
    for root in ["/sys", str(machine_root("cpu-2socket"))]:
        result = subprocess.run(
            [sys.executable, "-m", "torchx_ext.numa", "plan", "--nproc-per-node", "2", "--mode", "node",
             "--sysfs-root", root, "--json"],
            capture_output=True, text=True, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
        )
        assert result.returncode == 0, result.stderr
        assert [rank["cpus"] for rank in json.loads(result.stdout)["ranks"]] == [[cpu], [cpu]]


def test_snapshot_then_plan_elsewhere(tmp_path: Path) -> None:
    assert numa_cli("snapshot", str(tmp_path / "me")).returncode == 0
    here = json.loads(numa_cli("show", "--json").stdout)
    there = json.loads(numa_cli("show", "--sysfs-root", str(tmp_path / "me"), "--json", "--allowed-cpus",
                                ",".join(map(str, here["allowed"]))).stdout)
    assert there == here
    assert json.loads((tmp_path / "me" / "torchx_ext-snapshot.json").read_text())["host"] == socket.gethostname()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc-per-node", "2", "--mode", "numa"], "unknown NUMA binding mode 'numa': valid values are none, auto"),
        (["--nproc-per-node", "0"], "nproc per node must be an integer of at least 1, got 0"),
        (["--nproc-per-node", "1", "--allowed-cpus", "0-"], "malformed --allowed-cpus '0-'"),
        (["--nproc-per-node", "1", "--allowed-cpus", "4000"], "allowed CPUs 4000 include no online CPU"),
        (["--nproc-per-node", "1", "--sysfs-root", "/no/such/root"], "sysfs root '/no/such/root' does not exist"),
        (["--nproc-per-node", "1", "--visible-devices", "GPU-1234"], "GPU UUID or MIG name"),
        (["--nproc-per-node", "1", "--device-kind", "gpu"], "1 GPU rank needs 1 visible GPU, but 0 are visible"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args: list[str], message: str) -> None:
    result = numa_cli("plan", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_snapshot_into_an_unwritable_place_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    result = numa_cli("snapshot", str(tmp_path / "afile" / "x"))
    assert result.returncode == 2 and result.stderr.startswith("error: cannot write the snapshot under")


def test_numa_package_does_not_import_torch() -> None:
    code = "import sys, torchx_ext.numa, torchx_ext.numa.__main__; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"

"""Jobs in an allocation with ``-cfg warm=true``: the replicas' launchers are forked by a warm
interpreter on each node (a step of the allocation, started by the first such job), and are
otherwise what cold ones are. What such jobs do (faults, a frozen replica, retry policies,
logs, cancel) is the conformance suite's ``slurm-allocation-warm`` case; here: who started
what, a warm job beside a cold one, and what ends what."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.jobs_api import wait, wait_for_line
from tests.fixtures.slurm_cluster import hold_allocation, slurm_leftovers, warm_servers, warm_sockets, warm_up
from tests.helpers import still_there, torchx
from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.slurm.records import STATE_ROOT_ENV

REPO = Path(__file__).resolve().parents[2]
PROBE = str(REPO / "tests" / "slurm" / "jobs" / "warm_probe.py")
SLEEPER = str(REPO / "tests" / "conformance" / "jobs" / "sleeper.py")
AWKWARD = "a b $HOME \"q\" 'r' \\ \n next line"
FORKED = "is a fork of this node's warm interpreter"


@pytest.fixture
def job_dir(slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
    yield tmp_path / "the jobs"
    subprocess.run(["scancel", "--user=root", "--name=held"], capture_output=True)


def probes(handle: str, replicas: int, cwd: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """What each rank of the job said (``warm_probe.py``), and each replica's log."""
    said, logs = [], []
    for replica in range(replicas):
        log = torchx("log", f"{handle}/warm_probe/{replica}", cwd=cwd).stdout
        logs.append(log)
        said += [json.loads(line.split("PROBE ", 1)[1]) for line in log.splitlines() if "PROBE {" in line]
    return sorted(said, key=lambda probe: probe["rank"]), logs


def test_the_next_jobs_launchers_are_forks_of_each_nodes_warm_interpreter_and_start_their_workers_as_cold_ones_do(
    runner: Runner, job_dir: Path, tmp_path: Path
) -> None:
    allocation = hold_allocation(2)
    first = torchx("run", "-s", "slurm", "-cfg", f"job_dir={job_dir},allocation={allocation},warm=true", "--wait",
                   "dist.ddp", "-j", "2x1", "--cpu", "1", "--script", PROBE, cwd=tmp_path)
    assert first.returncode == 0 and "SUCCEEDED" in first.stderr, first.stderr
    assert re.search(rf"running in allocation {allocation} \(2 nodes\): no sbatch, no queue; its warm interpreters "
                     r"start now", first.stderr), first.stderr
    handle = next(line for line in first.stdout.splitlines() if line.startswith("slurm://"))
    _, logs = probes(handle, 2, tmp_path)
    # The first job starts them and runs cold; a replica that starts after its interpreter is up
    # (node rank 1 waits for node rank 0's agent) may already be forked.
    cold = "no warm interpreter answers on this node yet: its launcher starts anew"
    assert all((cold in log) != (FORKED in log) for log in logs) and cold in logs[0], logs
    still_starting = still_there(lambda: ["starting"] if len(warm_sockets(allocation)) < 2 else [], settle_s=90)
    assert still_starting == [], list(job_dir.glob("warm-*"))

    cfg = {"job_dir": str(job_dir), "allocation": allocation}
    ran = {}
    for warm in (True, False):
        app = ddp(script=PROBE, j="2x2", cpu=1, env={"PROBE_VALUE": AWKWARD})
        ran[warm] = runner.run(app, "slurm", cfg={**cfg, "warm": warm})
        assert wait(runner, ran[warm], timeout_s=120) == AppState.SUCCEEDED
    warm_probes, warm_logs = probes(ran[True], 2, tmp_path)
    cold_probes, cold_logs = probes(ran[False], 2, tmp_path)

    assert all(FORKED in log for log in warm_logs) and not any(FORKED in log for log in cold_logs), warm_logs
    launcher = f"{sys.executable} -m torchx_ext.launcher "
    for probe in warm_probes:
        # The launcher shows its own command; above it, the interpreter's guardian and the interpreter.
        assert probe["launcher"].startswith(launcher), probe
        assert any("torchx_ext.warm guard" in command for command in probe["above"]), probe["above"]
        assert any("torchx_ext.warm serve-slurm" in command for command in probe["above"]), probe["above"]
        assert not any("torchx_ext.schedulers.slurm.step" in command for command in probe["above"]), probe["above"]
    for probe in cold_probes:
        assert probe["launcher"].startswith(launcher), probe
        assert any("torchx_ext.schedulers.slurm.step" in command for command in probe["above"]), probe["above"]
        assert not any("torchx_ext.warm" in command for command in probe["above"]), probe["above"]

    def as_a_job_sees_it(probe: dict[str, Any]) -> tuple[Any, ...]:
        return probe["rank"], probe["world"], probe["cwd"], probe["umask"], len(probe["cpus"]), probe["value"]

    assert [as_a_job_sees_it(probe) for probe in warm_probes] == [as_a_job_sees_it(probe) for probe in cold_probes]
    assert [probe["rank"] for probe in warm_probes] == [0, 1, 2, 3] and warm_probes[0]["value"] == AWKWARD
    assert len(warm_sockets(allocation)) == 2  # still there for the next job


def step_programs(app_id: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
                command = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # srun's command line names it too.
            if f"TORCHX_EXT_SLURM_APP_ID={app_id}".encode() in environ and command[1:3] == [b"-m", b"torchx_ext.schedulers.slurm.step"]:
                found.append(int(entry.name))
    return found


def test_a_warm_jobs_forked_launcher_ends_with_its_cancel_or_its_step_program_and_the_interpreters_with_the_allocation(
    runner: Runner, job_dir: Path, tmp_path: Path
) -> None:
    allocation = hold_allocation(2)
    warm_up(allocation, 2, job_dir)
    cfg = {"job_dir": str(job_dir), "allocation": allocation, "warm": True}

    cancelled = runner.run(ddp(SLEEPER, script=SLEEPER, j="1x2", cpu=1), "slurm", cfg=cfg)
    wait_for_line(runner, cancelled, "sleeper", 0, r"running rank 1", timeout_s=60)
    assert FORKED in torchx("log", f"{cancelled}/sleeper/0", cwd=tmp_path).stdout
    assert torchx("cancel", cancelled, cwd=tmp_path).returncode == 0
    assert wait(runner, cancelled, timeout_s=30) == AppState.CANCELLED
    # Its launcher and workers, which run in the warm step, not in the job's: gone too.
    assert slurm_leftovers(parse_app_handle(cancelled).app_id) == []

    lost = runner.run(ddp(SLEEPER, script=SLEEPER, j="1x2", cpu=1), "slurm", cfg=cfg)
    wait_for_line(runner, lost, "sleeper", 0, r"running rank 1", timeout_s=60)
    assert FORKED in torchx("log", f"{lost}/sleeper/0", cwd=tmp_path).stdout
    app_id = parse_app_handle(lost).app_id
    (program,) = step_programs(app_id)
    os.kill(program, signal.SIGKILL)  # as Slurm kills a step's processes at its end
    assert slurm_leftovers(app_id) == []
    assert wait(runner, lost, timeout_s=60) == AppState.FAILED

    assert len(warm_sockets(allocation)) == 2 and warm_servers(allocation)  # the allocation's, untouched
    subprocess.run(["scancel", allocation], check=True)
    assert still_there(lambda: warm_servers(allocation), settle_s=20) == []

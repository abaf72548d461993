"""slurm workspaces on the real test cluster, through the CLI: the workspace is copied into the job's
directory at submission, so an edit made while the job waits in the queue does not reach it, and
the job's directory keeps the code that ran; ``--workspace ''`` runs the submit directory."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState

from tests.conformance.jobs_api import status_until
from tests.helpers import torchx
from torchx_ext.schedulers.slurm.records import STATE_ROOT_ENV
from torchx_ext.schedulers.backends import WORKSPACES


@pytest.fixture
def project(slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "main.py").write_text("print('CODE VERSION 1', flush=True)\n")
    (root / "helper.py").write_text("WORD = 'helper 1'\n")
    (root / ".torchxignore").write_text("data/\n")
    (root / "data" / "big.bin").write_bytes(b"\0" * 4096)
    yield root
    subprocess.run(["scancel", "--user=root", "--name=sleeper"], capture_output=True)


def handle_of(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("slurm://"))


def log_of(handle: str, cwd: Path) -> str:
    logged = torchx("log", f"{handle}/main/0", cwd=cwd)
    assert logged.returncode == 0, logged.stderr
    return logged.stdout


@pytest.mark.feature(WORKSPACES, backend="slurm")
def test_an_edit_made_while_the_job_waits_does_not_reach_it_and_its_directory_keeps_the_code(
    project: Path, runner: Runner, tmp_path: Path
) -> None:
    jobs = project / "jobs"  # inside the workspace: never copied into a job
    (project / "main.py").write_text("import helper\nprint('CODE VERSION 1', helper.WORD, flush=True)\n")
    # A job of another user's kind holds both nodes for a while: ours waits in the queue.
    subprocess.run(["sbatch", "--job-name=sleeper", "--nodes=2", "--exclusive", f"--output={tmp_path}/sleeper.out",
                    "--wrap", "sleep 6"], check=True, capture_output=True, cwd=tmp_path)
    submitted = torchx("run", "-s", "slurm", "-cfg", f"job_dir={jobs}", "dist.ddp", "-j", "1x1", "--script", "main.py",
                       cwd=project)
    assert submitted.returncode == 0, submitted.stderr
    handle = handle_of(submitted.stdout)
    assert status_until(runner, handle, lambda status: True).state == AppState.PENDING

    # Edited, and a file removed, while the job waits (as `git checkout` of another branch would).
    (project / "main.py").write_text("print('CODE VERSION 2', flush=True)\n")
    (project / "helper.py").unlink()
    assert status_until(runner, handle, lambda status: status.is_terminal()).state == AppState.SUCCEEDED
    assert "CODE VERSION 1 helper 1" in log_of(handle, project)

    copies = list(jobs.glob("*/workspace"))
    assert len(copies) == 1
    copy = copies[0]
    assert (copy / "main.py").read_text().startswith("import helper")
    assert sorted(path.relative_to(copy).as_posix() for path in copy.rglob("*")) == [
        ".torchxignore", "helper.py", "main.py"]  # no data/ (.torchxignore), no jobs/

    again = torchx("run", "-s", "slurm", "-cfg", f"job_dir={jobs}", "--wait", "dist.ddp", "-j", "1x1",
                   "--script", "main.py", cwd=project, timeout=180)
    assert again.returncode == 0, again.stderr
    assert "CODE VERSION 2" in log_of(handle_of(again.stdout), project)


def test_no_workspace_runs_the_submit_directory(project: Path) -> None:
    jobs = project.parent / "jobs"
    ran = torchx("run", "-s", "slurm", "-cfg", f"job_dir={jobs}", "--workspace", "", "--wait", "dist.ddp", "-j",
                 "1x1", "--script", "main.py", cwd=project, timeout=180)
    assert ran.returncode == 0, ran.stderr
    assert "CODE VERSION 1" in log_of(handle_of(ran.stdout), project)
    assert not list(jobs.glob("*/workspace"))
    dryrun = torchx("run", "-s", "slurm", "-cfg", f"job_dir={jobs}", "--dryrun", "dist.ddp", "--script", "main.py",
                    cwd=project)
    assert f"workspace: {project}, copied into {jobs}/" in dryrun.stdout, dryrun.stdout
    assert f"#SBATCH --chdir={jobs}/" in dryrun.stdout and "/workspace\n" in dryrun.stdout

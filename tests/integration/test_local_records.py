"""local_cwd's records on disk: who may read them, what a record of another version gets,
and removing a finished job."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.helpers import TORCHX
from tests.conformance.jobs_api import wait
from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.local import create_scheduler
from torchx_ext.schedulers.local.records import LocalJobDir, SupervisorRecord

JOB = Path(__file__).parents[1] / "conformance" / "jobs" / "echo.py"


@pytest.fixture
def finished_job(runner: Runner) -> tuple[str, Path]:
    """A job that ran to SUCCEEDED, and its directory."""
    handle = runner.run(ddp("hello", script=str(JOB), j="1x1"), "local_cwd")
    assert wait(runner, handle) == AppState.SUCCEEDED
    status = runner.status(handle)
    assert status is not None
    return handle, Path(status.ui_url.removeprefix("file://"))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_job_directory_is_the_users_alone(finished_job: tuple[str, Path]) -> None:
    _, job_dir = finished_job
    replica_dir = job_dir / "echo" / "0"

    assert mode(job_dir) == 0o700
    assert mode(job_dir / "request.json") == 0o600  # holds every --env value
    assert mode(job_dir / "state.json") == 0o600
    assert mode(replica_dir / "stdout.log") == 0o600
    assert mode(replica_dir / "combined.log") == 0o600


def test_list_skips_unreadable_records_with_one_warning_each(finished_job: tuple[str, Path], state_dir: Path) -> None:
    handle, job_dir = finished_job
    good_id = parse_app_handle(handle).app_id
    records = {}
    for name, spoil in (("newer-abc", _add_unknown_key), ("garbage-abc", lambda _: "{not json")):
        copy = job_dir.parent / name
        shutil.copytree(job_dir, copy)
        (copy / "state.json").write_text(spoil((copy / "state.json").read_text()))
        (state_dir / "jobs" / name).write_text(str(copy))
        records[name] = copy / "state.json"

    listed = subprocess.run([*TORCHX, "list", "-s", "local_cwd"], capture_output=True, text=True, timeout=120)

    assert listed.returncode == 0, listed.stderr
    assert good_id in listed.stdout and "SUCCEEDED" in listed.stdout
    assert "newer-abc" not in listed.stdout and "garbage-abc" not in listed.stdout
    warnings = [line for line in listed.stderr.splitlines() if line.startswith("warning: local_cwd")]
    assert len(warnings) == 2, listed.stderr
    assert any(str(records["newer-abc"]) in line and "unknown key(s) written_by" in line for line in warnings)
    assert any(str(records["garbage-abc"]) in line and "not JSON" in line for line in warnings)


def test_describe_of_an_unreadable_record_says_what_is_wrong(finished_job: tuple[str, Path], runner: Runner) -> None:
    handle, job_dir = finished_job
    state = json.loads((job_dir / "state.json").read_text())
    state["format"] = 99
    (job_dir / "state.json").write_text(json.dumps(state))

    status = runner.status(handle)

    assert status is not None and status.state == AppState.UNKNOWN
    assert str(job_dir / "state.json") in status.msg and "record format 99" in status.msg


def test_delete_removes_a_finished_job_and_its_logs(finished_job: tuple[str, Path], runner: Runner) -> None:
    handle, job_dir = finished_job
    app_id = parse_app_handle(handle).app_id

    create_scheduler("torchx").delete(app_id)

    assert not job_dir.exists()
    assert runner.status(handle) is None
    assert app_id not in [app.app_id for app in runner.list("local_cwd")]


def _add_unknown_key(text: str) -> str:
    data = json.loads(text)
    data["written_by"] = "torchx_ext 9.9"
    return json.dumps(data)


def test_the_supervisor_holding_the_job_is_the_one_recorded_whichever_writes_first(tmp_path: Path) -> None:
    # A late warm start and the cold supervisor started instead: the submitter records the pid it
    # started only where none is recorded, the supervisor that took the job's lock always.
    job = LocalJobDir(tmp_path / "job")
    job.path.mkdir()
    holder, other = SupervisorRecord.of(os.getpid()), SupervisorRecord(os.getpid() + 1, 1, "elsewhere", "boot")

    job.record_supervisor(other, unless_recorded=True)  # the submitter first
    job.record_supervisor(holder)
    job.record_supervisor(other, unless_recorded=True)  # the submitter last

    recorded = job.supervisor_record()
    assert recorded is not None and (recorded.pid, recorded.host) == (holder.pid, holder.host)
    assert job.supervisor_alive()
    assert sorted(path.name for path in job.path.iterdir()) == ["supervisor"]

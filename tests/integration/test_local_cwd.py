"""local_cwd beyond the conformance suite: the CLI's lifetime, slices, logs, retries, bad input."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from torchx.runner import Runner, get_runner
from torchx.schedulers.api import Stream
from torchx.specs import AppState, parse_app_handle

from tests.conformance.conftest import JOBS as CONFORMANCE_JOBS
from tests.conformance.conftest import _local_leftovers, _local_processes
from tests.helpers import TORCHX, torchx
from tests.conformance.jobs_api import wait, wait_for_line
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.local.processes import process_start_ticks

JOBS = Path(__file__).parent / "jobs"


def start_cli_job(j: str) -> tuple[subprocess.Popen[str], str]:
    """`torchx run` of a sleeping job in its own process, and the app handle it printed."""
    # As a terminal runs it: with Ctrl+C's default action, even when the tests themselves run in
    # the background (where a shell starts them with SIGINT ignored, which children inherit).
    cli = subprocess.Popen(
        [*TORCHX, "run", "-s", "local_cwd", "dist.ddp", "-j", j, "--script", str(CONFORMANCE_JOBS / "sleeper.py")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert cli.stdout is not None
    handle = cli.stdout.readline().strip()
    assert handle.startswith("local_cwd://"), handle
    return cli, handle


def test_a_job_outlives_its_killed_cli_and_is_cancelled_from_new_processes(state_dir: Path) -> None:
    cli, handle = start_cli_job("2x2")
    with get_runner() as runner:
        wait_for_line(runner, handle, "sleeper", 1, "running rank 3")
    cli.send_signal(signal.SIGKILL)
    cli.wait()

    running = torchx("status", handle)
    cancelled = torchx("cancel", handle)
    after = torchx("status", handle)

    assert "State: RUNNING" in running.stdout, running.stdout + running.stderr
    assert cancelled.returncode == 0, cancelled.stderr
    assert "State: CANCELLED" in after.stdout, after.stdout + after.stderr
    assert _local_leftovers(parse_app_handle(handle).app_id) == []


def test_ctrl_c_on_the_cli_ends_its_job(runner: Runner) -> None:
    cli, handle = start_cli_job("2x1")
    wait_for_line(runner, handle, "sleeper", 1, "running rank 1")

    cli.send_signal(signal.SIGINT)  # what Ctrl+C in its terminal sends
    cli.wait(timeout=60)

    assert wait(runner, handle, timeout_s=5) == AppState.CANCELLED
    assert _local_leftovers(parse_app_handle(handle).app_id) == []


def test_two_replicas_on_this_host_each_get_their_own_cpu(runner: Runner, two_cpus: list[int]) -> None:
    handle = runner.run(ddp(script=str(JOBS / "cpus.py"), j="2x1"), "local_cwd")
    assert wait(runner, handle) == AppState.SUCCEEDED

    reported: dict[int, set[int]] = {}
    for replica in (0, 1):
        for line in runner.log_lines(handle, "cpus", replica):
            if match := re.search(r"replica (\d) cpus \[(.*)\]", line):
                reported[int(match[1])] = {int(cpu) for cpu in match[2].split(", ")}

    assert len(reported) == 2 and reported[0] and reported[1], reported
    assert reported[0].isdisjoint(reported[1]), reported
    assert reported[0] | reported[1] <= set(two_cpus)


def test_slicing_off_gives_every_replica_the_whole_host(runner: Runner, two_cpus: list[int]) -> None:
    handle = runner.run(ddp(script=str(JOBS / "cpus.py"), j="2x1"), "local_cwd", cfg={"slice_replicas": False})
    assert wait(runner, handle) == AppState.SUCCEEDED
    lines = [line for replica in (0, 1) for line in runner.log_lines(handle, "cpus", replica) if "cpus [" in line]
    assert len(lines) == 2 and all(", ".join(map(str, two_cpus)) in line for line in lines), lines


def test_dry_run_on_a_fixture_host_shows_node_aligned_slices(machine_root, state_dir: Path) -> None:  # type: ignore[no-untyped-def]
    result = torchx(
        "run", "-s", "local_cwd", "--dryrun", "-cfg", f"sysfs_root={machine_root('dgx-h100')}",
        "dist.ddp", "-j", "2x4", "--gpu", "8", "--script", str(JOBS / "cpus.py"),
    )

    assert result.returncode == 0, result.stderr
    assert "slice replica 0: cpus=0-55,112-167 numa_nodes=0 gpus=0,1,2,3" in result.stdout, result.stdout
    assert "slice replica 1: cpus=56-111,168-223 numa_nodes=1 gpus=4,5,6,7" in result.stdout
    assert "CUDA_VISIBLE_DEVICES='4,5,6,7'" in result.stdout
    assert not (state_dir / "jobs").exists(), "a dry run must not start or record anything"


def test_log_iter_filters_by_time_stream_and_regex_and_follows_a_running_job(runner: Runner) -> None:
    handle = runner.run(ddp("2", script=str(JOBS / "streams.py"), j="1x1", tee=0), "local_cwd")
    wait_for_line(runner, handle, "streams", 0, "early err 2")
    middle = datetime.datetime.now() + datetime.timedelta(seconds=0.5)

    followed = list(runner.log_lines(handle, "streams", 0, should_tail=True))  # returns when the job ends

    assert wait(runner, handle) == AppState.SUCCEEDED
    late_only = list(runner.log_lines(handle, "streams", 0, since=middle))
    early_only = list(runner.log_lines(handle, "streams", 0, until=middle))
    stderr = list(runner.log_lines(handle, "streams", 0, streams=Stream.STDERR))
    matching = list(runner.log_lines(handle, "streams", 0, regex=r"out [02]$"))
    # combined.log interleaves the two pipes in the order they were read: each stream in order
    for stream in ("out", "err"):
        assert [line for line in followed if f"late {stream}" in line] == [f"late {stream} {i}\n" for i in range(3)]
    assert {line.split()[0] for line in late_only if "early" in line or "late" in line} == {"late"}
    assert {line.split()[0] for line in early_only if "early" in line or "late" in line} == {"early"}
    assert [line for line in stderr if "out" in line] == []
    assert [line for line in stderr if "err" in line][-1] == "late err 2\n"
    assert matching == ["early out 0\n", "early out 2\n", "late out 0\n", "late out 2\n"]


def test_max_retries_restarts_a_failed_replica(runner: Runner, tmp_path: Path) -> None:
    app = ddp(str(tmp_path / "ran-once"), script=str(JOBS / "flaky.py"), j="1x1", max_retries=1)
    handle = runner.run(app, "local_cwd")

    assert wait(runner, handle) == AppState.SUCCEEDED
    status = runner.status(handle)
    assert status is not None and status.num_restarts == 1
    assert any("second attempt succeeded" in line for line in runner.log_lines(handle, "flaky", 0))


@pytest.mark.parametrize(("target", "said"), [
    (["--script", "no/such/script.py"], "torchx: error: script 'no/such/script.py' of role 'script' does not exist"),
    (["-m", "no_such_package.train"], "torchx: error: module 'no_such_package.train' of role 'train' cannot be imported"),
    (["-m", "examples.no_such_module"], "torchx: error: module 'examples.no_such_module' of role 'no_such_module' cannot "
                                        "be imported"),
])
def test_a_script_or_module_that_does_not_exist_is_refused_before_anything_is_recorded(
        target: list[str], said: str, state_dir: Path) -> None:
    result = torchx("run", "-s", "local_cwd", "dist.ddp", "-j", "2x1", *target)

    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(said), result.stderr
    assert "Traceback" not in result.stderr and "local_cwd://" not in result.stdout
    assert not (state_dir / "jobs").exists() and not (state_dir / "logs").exists()


def test_an_unwritable_log_dir_is_refused_before_anything_starts(tmp_path: Path, state_dir: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    result = torchx("run", "-s", "local_cwd", "-cfg", f"log_dir={blocker}/logs", "dist.ddp", "-j", "1x1",
                    "--script", str(JOBS / "cpus.py"))

    assert result.returncode != 0
    assert f"torchx: error: cannot write the job's directory {blocker}/logs/" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert "-cfg log_dir=DIR" in result.stderr
    assert not (state_dir / "jobs").exists()


@pytest.mark.parametrize("command", ["status", "describe", "cancel", "log"])
def test_malformed_and_unknown_app_handles_get_one_clear_line(command: str, state_dir: Path) -> None:
    malformed = torchx(command, "not-a-handle", timeout=30)
    unknown = torchx(command, "local_cwd://torchx/no-such-app-1234", timeout=30)

    assert malformed.returncode == 2 and unknown.returncode == 1  # bad input, not found (README: exit codes)
    assert "malformed app handle 'not-a-handle': expected SCHEDULER://SESSION/APP_ID" in malformed.stderr
    assert "no app 'no-such-app-1234' on local_cwd" in unknown.stderr
    assert "Traceback" not in malformed.stderr + unknown.stderr


def test_python_entrypoint_runs_with_the_submitting_interpreter(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no python on PATH: only sys.executable can run it
    handle = runner.run(ddp(script=str(JOBS / "cpus.py"), j="1x1"), "local_cwd")
    assert wait(runner, handle) == AppState.SUCCEEDED


def test_a_killed_supervisor_fails_the_job_and_nothing_runs_on(runner: Runner) -> None:
    handle = runner.run(ddp(script=str(CONFORMANCE_JOBS / "sleeper.py"), j="1x2"), "local_cwd")
    wait_for_line(runner, handle, "sleeper", 0, "running rank 1")
    app = parse_app_handle(handle).app_id
    supervisors = [line for line in _local_processes(app) if "torchx_ext.schedulers.local.supervisor" in line]
    assert len(supervisors) == 1, supervisors
    supervisor = int(supervisors[0].split()[1].rstrip(":"))
    os.kill(supervisor, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while process_start_ticks(supervisor) is not None and time.monotonic() < deadline:
        time.sleep(0.02)  # the signal is delivered asynchronously

    orphaned = runner.status(handle)

    assert orphaned is not None and orphaned.state == AppState.FAILED
    assert "supervisor ended without recording an end" in orphaned.msg
    assert _local_leftovers(app) == []


def test_a_second_supervisor_started_for_a_running_job_ends_and_the_job_runs_on(runner: Runner) -> None:
    # A warm start that answers after its submitter gave up on it (and started a cold supervisor)
    # leaves two supervisors for one job: the one without the job's lock ends. Whatever order the
    # two start and record themselves in, the job must not read as orphaned once it has gone.
    handle = runner.run(ddp(script=str(CONFORMANCE_JOBS / "sleeper.py"), j="1x1"), "local_cwd")
    wait_for_line(runner, handle, "sleeper", 0, "running rank 0")
    status = runner.status(handle)
    assert status is not None
    job_dir = Path(status.ui_url.removeprefix("file://"))

    late = subprocess.run([sys.executable, "-m", "torchx_ext.schedulers.local.supervisor", str(job_dir)],
                          capture_output=True, text=True, timeout=30, cwd=job_dir)

    assert "another supervisor runs this job" in late.stderr, late.stderr
    after = runner.status(handle)
    assert after is not None and after.state == AppState.RUNNING, after
    runner.cancel(handle)
    assert wait(runner, handle) == AppState.CANCELLED
    assert _local_leftovers(parse_app_handle(handle).app_id) == []


def test_a_replica_whose_slice_this_host_lacks_fails_the_job_and_nothing_runs_on(
    runner: Runner, machine_root: Callable[[str], Path], two_cpus: list[int]
) -> None:
    # Planned for a DGX: replica 1's slice (CPUs 56-111,168-223) does not exist here.
    cfg = {"sysfs_root": str(machine_root("dgx-h100"))}
    handle = runner.run(ddp(script=str(CONFORMANCE_JOBS / "sleeper.py"), j="2x1"), "local_cwd", cfg=cfg)

    assert wait(runner, handle) == AppState.FAILED
    status = runner.status(handle)
    assert status is not None and "replica sleeper/1 could not start" in status.msg, status.msg
    assert "56-111,168-223" in status.msg
    assert _local_leftovers(parse_app_handle(handle).app_id) == []


def test_an_app_name_unfit_for_an_id_is_made_fit(runner: Runner) -> None:
    handle = runner.run(ddp(script=str(JOBS / "cpus.py"), j="1x1", name="exp/_my run!"), "local_cwd")

    assert parse_app_handle(handle).app_id.startswith("my-run-")
    assert wait(runner, handle) == AppState.SUCCEEDED


def test_a_malformed_log_regex_is_refused_naming_it(runner: Runner) -> None:
    handle = runner.run(ddp(script=str(JOBS / "cpus.py"), j="1x1"), "local_cwd")
    with pytest.raises(InvalidArgumentError, match=r"invalid log regex '\(unclosed'"):
        runner.log_lines(handle, "cpus", 0, regex="(unclosed")
    wait(runner, handle)


def test_replica_k_runs_group_rank_k(runner: Runner, tmp_path: Path) -> None:
    # torch's c10d ranks launchers by --local-addr (else host name), then pid: each replica here gets one of its own
    # (127.0.0.{20-k}), so that torch's order is the reverse of the replicas'.
    app = ddp(str(tmp_path), script=str(JOBS / "report.py"), j="8x1")
    role = app.roles[0]
    reverse = ("import os, sys; k = int(os.environ['TORCHX_EXT_REPLICA'].rpartition('/')[2]); "
               "os.environ['PET_LOCAL_ADDR'] = f'127.0.0.{20 - k}'; os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
    role.entrypoint, role.args = sys.executable, ["-c", reverse, *role.args]
    handle = runner.run(app, "local_cwd", cfg={"slice_replicas": False})
    assert wait(runner, handle, timeout_s=300) == AppState.SUCCEEDED, runner.status(handle)

    reports = [json.loads(path.read_text()) for path in tmp_path.glob("rank*.json")]
    assert sorted((report["replica"], report["group_rank"], report["rank"]) for report in reports) == [
        (f"report/{k}", k, k) for k in range(8)]

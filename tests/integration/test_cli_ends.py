"""What a user sees at the end of ``torchx run`` and at a refused input: one line for a cancel
(from another shell or Ctrl+C), a short summary for a failure, one ``torchx: error:`` line with
exit code 2 for bad input, and nothing left behind (processes, temporary directories)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchx.runner import get_runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.conftest import JOBS as CONFORMANCE_JOBS
from tests.conformance.conftest import _local_leftovers
from tests.conformance.jobs_api import wait_for_line
from tests.helpers import TORCHX, torchx
from tests.integration.test_torchx_lines import nightly_only

JOBS = Path(__file__).parent / "jobs"
TORCHX_DUMP = ("Traceback", "!!python", "AppStatus", "structured_error_msg")


def attached_run(*component: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """``torchx run -s local_cwd COMPONENT...`` as a terminal starts it (Ctrl+C's default action),
    and the app handle it printed."""
    cli = subprocess.Popen(
        [*TORCHX, "run", "-s", "local_cwd", *component],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert cli.stdout is not None
    handle = cli.stdout.readline().strip()
    assert handle.startswith("local_cwd://"), handle
    return cli, handle


def ended(cli: subprocess.Popen[str]) -> tuple[int, list[str]]:
    _, stderr = cli.communicate(timeout=90)
    return cli.returncode, [line for line in stderr.splitlines() if line.strip()]


def sleeping_job(state_dir: Path) -> tuple[subprocess.Popen[str], str]:
    cli, handle = attached_run("dist.ddp", "-j", "1x2", "--script", str(CONFORMANCE_JOBS / "sleeper.py"))
    with get_runner() as runner:
        wait_for_line(runner, handle, "sleeper", 0, "running rank 1")
    return cli, handle


def test_a_job_cancelled_from_another_shell_ends_its_attached_run_with_one_line(state_dir: Path) -> None:
    cli, handle = sleeping_job(state_dir)

    assert torchx("cancel", handle).returncode == 0
    code, lines = ended(cli)

    assert code == 1 and lines[-1] == f"job cancelled: {handle}", lines[-5:]
    assert not [line for line in lines if any(mark in line for mark in TORCHX_DUMP)], lines
    assert "[torchx_ext.launcher] stopped by SIGTERM; workers stopped" in "\n".join(lines)
    assert _local_leftovers(parse_app_handle(handle).app_id) == []


def test_ctrl_c_cancels_the_attached_job_and_says_so_in_one_line(state_dir: Path) -> None:
    cli, handle = sleeping_job(state_dir)

    cli.send_signal(signal.SIGINT)
    code, lines = ended(cli)

    assert code == 130 and lines[-1] == f"job cancelled: {handle}", lines[-5:]
    assert not [line for line in lines if any(mark in line for mark in (*TORCHX_DUMP, "KeyboardInterrupt"))], lines
    with get_runner() as runner:
        status = runner.status(handle)
    assert status is not None and status.state == AppState.CANCELLED
    assert _local_leftovers(parse_app_handle(handle).app_id) == []


def test_a_second_ctrl_c_leaves_at_once_in_one_line(state_dir: Path) -> None:
    cli, handle = sleeping_job(state_dir)

    cli.send_signal(signal.SIGINT)
    time.sleep(0.2)
    cli.send_signal(signal.SIGINT)
    code, lines = ended(cli)

    assert code == 130, lines[-5:]
    assert lines[-1].startswith(("job being cancelled: ", "job cancel interrupted: ", "job cancelled: ")), lines[-5:]
    assert handle in lines[-1] and not [line for line in lines if "Traceback" in line], lines
    assert torchx("cancel", handle).returncode == 0  # whatever the first Ctrl+C got done
    with get_runner() as runner:
        status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.CANCELLED
    assert _local_leftovers(parse_app_handle(handle).app_id) == []


def test_a_failed_job_ends_with_its_failing_replica_and_error_not_a_status_dump(state_dir: Path) -> None:
    cli, handle = attached_run("dist.ddp", "-j", "1x2", "--script", str(JOBS / "raise_job.py"))
    code, lines = ended(cli)

    assert code == 1
    summary = lines[lines.index(f"job failed: {handle}"):]
    assert len(summary) == 3, summary
    assert re.fullmatch(r"  replica raise_job/0 exited with code 1: ValueError: rank one is broken on purpose "
                        r"\(logs: .*/raise_job/0\)", summary[1]), summary[1]
    assert summary[2] == f"  its output: torchx log {handle}"
    assert not [line for line in lines if any(mark in line for mark in ("!!python", "AppStatus"))], lines


@nightly_only  # torchx run --json is torchx-nightly's
def test_a_failed_job_under_json_prints_its_status_as_json_and_the_summary_not_a_dump(state_dir: Path) -> None:
    result = torchx("run", "-s", "local_cwd", "--json", "dist.ddp", "-j", "1x2", "--script", str(JOBS / "raise_job.py"))

    assert result.returncode == 1, result.stderr[-2000:]
    document = json.loads(result.stdout.strip().splitlines()[-1])
    assert document["handle"].startswith("local_cwd://") and document["state"] == "FAILED", document
    assert f"job failed: {document['handle']}" in result.stderr
    assert "AppStatus" not in result.stderr and "!!python" not in result.stderr


def test_a_log_of_a_replica_or_role_the_job_lacks_is_one_line_naming_what_it_has(state_dir: Path) -> None:
    with get_runner() as runner:
        handle = runner.run_component("dist.ddp", ["-j", "1x1", "--script", str(JOBS / "cpus.py")], "local_cwd")
        runner.wait(handle, wait_interval=0.2)

    replica, role, malformed = (torchx("log", f"{handle}/{path}") for path in ("cpus/5", "nope", "cpus/x"))

    app_id = parse_app_handle(handle).app_id
    assert (replica.returncode, replica.stderr) == (2, f"torchx: error: app {app_id} has no replica cpus/5: it has cpus/0\n")
    assert (role.returncode, role.stderr) == (2, f"torchx: error: app {app_id} has no role 'nope': it has cpus\n")
    assert malformed.returncode == 2 and malformed.stderr.count("\n") == 1
    assert malformed.stderr.startswith("torchx: error: malformed replica id 'x'")


def test_an_unknown_named_resource_lists_the_known_ones_sorted_once_without_placeholders() -> None:
    result = torchx("run", "--dryrun", "-s", "local_cwd", "dist.ddp", "-h", "dgx_h1000", "--script", "examples/train.py")

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    prefix = "torchx: error: unknown named resource -h 'dgx_h1000' (did you mean dgx_h100?): known are "
    assert result.stderr.startswith(prefix), result.stderr
    names = result.stderr[len(prefix):].strip().split(", ")
    assert names == sorted(set(names)) and "dgx_h100" in names and "gpu.small" in names
    assert not {"NULL", "MISSING"} & set(names)


def test_the_debug_variable_shows_the_traceback_of_an_input_error() -> None:
    result = torchx("run", "--dryrun", "-s", "local_cwd", "dist.ddp", "-h", "dgx_h1000", "--script", "examples/train.py",
                    env={"TORCHX_EXT_DEBUG": "1"})

    assert result.returncode != 0 and "Traceback" in result.stderr
    assert "InvalidArgumentError: unknown named resource -h 'dgx_h1000'" in result.stderr


@pytest.mark.parametrize("component", ["dist.ddp", "dist.spmd"])
def test_component_help_shows_booleans_as_flags_and_the_scripts_arguments_as_optional(component: str) -> None:
    result = torchx("run", "-s", "local_cwd", component, "--help", env={"COLUMNS": "200"})

    assert result.returncode == 0, result.stderr
    assert re.search(r"^  --numa_strict +fail instead of taking a binding fallback \(a flag; default: off\)$",
                     result.stdout, re.MULTILINE), result.stdout
    assert re.search(r"^  --debug +.*\(a flag; default: off\)$", result.stdout, re.MULTILINE), result.stdout
    assert "(required)" not in result.stdout and not re.search(r"\bstr\b", result.stdout)
    assert re.search(r"^  ARG +arguments to the script or module.*\(optional", result.stdout, re.MULTILINE)
    has_memory = "--memMB" in result.stdout
    assert has_memory == (component == "dist.ddp")  # spmd takes its sizes from -h


@pytest.mark.parametrize("flag", [["--debug", "1"], ["--numa_strict", "yes"]])
def test_a_boolean_given_neither_true_nor_false_is_refused_not_read_as_false(flag: list[str]) -> None:
    result = torchx("run", "--dryrun", "-s", "local_cwd", "dist.ddp", *flag, "--script", "examples/train.py")

    assert result.returncode == 2 and result.stderr == (
        f"torchx: error: dist.ddp: {flag[0]} {flag[1]!r}: {flag[0]} is a flag: give it alone, or followed by true or false\n")


def test_help_after_the_scripts_first_argument_is_the_scripts() -> None:
    result = torchx("run", "--dryrun", "-s", "local_cwd", "dist.ddp", "--script", "examples/train.py", "data", "--help")

    assert result.returncode == 0, result.stderr
    argv = next(line for line in result.stdout.splitlines() if "argv:" in line)
    assert argv.endswith("'examples/train.py', 'data', '--help']"), argv


@pytest.mark.parametrize(("flags", "strict"), [(["--numa_strict"], True), (["--numa_strict", "False"], False),
                                               (["--numa_strict", "true"], True), ([], False)])
def test_numa_strict_works_as_a_bare_flag_and_with_a_value(flags: list[str], strict: bool) -> None:
    result = torchx("run", "--dryrun", "-s", "local_cwd", "dist.ddp", *flags, "--script", "examples/train.py",
                    "--", "--numa_strict")

    assert result.returncode == 0, result.stderr
    argv = next(line for line in result.stdout.splitlines() if "argv:" in line)
    assert argv.count("--numa-strict") == int(strict) and argv.endswith("'--numa_strict']"), argv


def test_the_launcher_leaves_no_temporary_directory_in_any_worker_start_nor_through_its_api(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    runs = {
        mode: ["-m", "torchx_ext.launcher", "--nproc-per-node", "2", "--worker-start", mode, str(JOBS / "cpus.py")]
        for mode in ("preloaded", "fresh")
    }
    runs["launch()"] = ["-c", "from torchx_ext.launcher import launch; launch(print, 'hello', nproc_per_node=2)"]
    for mode, args in runs.items():
        result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "TMPDIR": str(scratch)})
        assert result.returncode == 0, result.stderr[-2000:]
        assert list(scratch.iterdir()) == [], (mode, list(scratch.iterdir()))


def test_redirected_worker_output_is_kept_and_its_directory_named(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "torchx_ext.launcher", "--nproc-per-node", "1", "--redirects", "3", str(JOBS / "cpus.py")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)},
    )

    assert result.returncode == 0, result.stderr[-2000:]
    kept = re.search(r"redirected worker output goes to files under (\S+) \(kept", result.stderr)
    assert kept is not None and Path(kept[1]).parent == tmp_path, result.stderr
    assert sorted(path.name for path in Path(kept[1]).rglob("*.log")) == ["stderr.log", "stdout.log"]
    assert "cpus" in "".join(path.read_text() for path in Path(kept[1]).rglob("stdout.log"))


def test_each_rank_logs_the_thread_count_its_worker_gets_and_is_titled_by_script_and_rank(tmp_path: Path) -> None:
    script = tmp_path / "titled.py"
    script.write_text(
        "import os, torch\n"
        "title = open('/proc/self/cmdline', 'rb').read().replace(b'\\0', b' ').decode().strip()\n"
        "print(f\"rank {os.environ['RANK']} torch_threads={torch.get_num_threads()} title={title}\", flush=True)\n"
    )
    # No --omp-threads: each worker inherits torchrun's OMP_NUM_THREADS=1, and a preloaded one
    # (whose torch was imported before) must get it in torch too.
    result = subprocess.run(
        [sys.executable, "-m", "torchx_ext.launcher", "--nproc-per-node", "2", str(script), "--lr", "0.1"],
        capture_output=True, text=True, timeout=120, env={key: value for key, value in os.environ.items()
                                                          if key != "OMP_NUM_THREADS"},
    )

    assert result.returncode == 0, result.stderr[-2000:]
    logged = re.findall(r"local_rank=(\d) .* OMP_NUM_THREADS=(\d+)$", result.stderr, re.MULTILINE)
    assert logged == [("0", "1"), ("1", "1")], result.stderr
    assert "threads=" not in result.stderr.replace("OMP_NUM_THREADS=", "")
    for rank in (0, 1):
        assert f"rank {rank} torch_threads=1 title=python {script} --lr 0.1 (torchx_ext rank {rank}, local rank {rank})" \
            in result.stdout, result.stdout


def test_a_job_on_local_cwd_leaves_no_temporary_directory(tmp_path: Path, state_dir: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    started = time.monotonic()
    result = torchx("run", "-s", "local_cwd", "dist.ddp", "-j", "2x1", "--script", str(JOBS / "cpus.py"),
                    env={"TMPDIR": str(scratch)})

    assert result.returncode == 0, result.stderr[-2000:]
    assert list(scratch.iterdir()) == [], (list(scratch.iterdir()), time.monotonic() - started)


def test_list_on_an_engine_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    result = torchx("list", "-s", "local_docker", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})

    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"torchx: error: no Docker engine answers at unix://{tmp_path}/no.sock")


def test_a_parameter_the_component_lacks_is_one_line_not_a_usage_text() -> None:
    result = torchx("run", "--dryrun", "-s", "local_cwd", "dist.spmd", "--cpu", "4", "--script", "examples/train.py")

    assert result.returncode == 2, result.stderr
    assert result.stderr == ("torchx: error: dist.spmd: unrecognized arguments: --cpu "
                             "(`torchx run dist.spmd --help` lists its parameters)\n")


def test_a_flag_after_the_scripts_first_argument_is_the_scripts() -> None:
    result = torchx("run", "--dryrun", "-s", "local_cwd", "dist.ddp", "--script", "examples/train.py", "a", "--numa_strict")

    assert result.returncode == 0, result.stderr
    argv = next(line for line in result.stdout.splitlines() if "argv:" in line)
    assert "'--numa-strict'" not in argv and argv.endswith("'examples/train.py', 'a', '--numa_strict']"), argv

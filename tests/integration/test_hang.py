"""A rank that hangs, alive: found by the launcher's watchdog or the worker's own timer, every rank's
stack in the log before anything is stopped, and the job goes on; healthy quiet jobs are left alone.

The hung job (tests/conformance/jobs/hung.py) checkpoints every step; rank 1 waits for ever at one
step, outside any collective, while rank 0 waits in the step's all-reduce (gloo's own timeout is 30
minutes). Times compared here are this host's: the hung rank's and the checkpoint's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_faults import _history
from tests.helpers import free_port
from tests.integration.launcher_helpers import JOBS, LAUNCHER, clean_env, run_launcher
from torchx_ext.stack_request import STACKS_BEGIN, STACKS_END

HUNG = str(Path(__file__).parents[1] / "conformance" / "jobs" / "hung.py")
QUIET = str(JOBS / "quiet_ranks.py")
HANG_LINE = "hang: no rank of the job moved for"


class Node:
    """One launcher, as one host of a job, its output in a file."""

    def __init__(self, directory: Path, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        self.log = directory / f"{name}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen([*LAUNCHER, *args], stdout=out, stderr=subprocess.STDOUT,
                                            env=clean_env(**(env or {})), start_new_session=True)

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def started() -> Any:
    nodes: list[Node] = []
    yield nodes
    for node in nodes:
        if node.process.poll() is None:
            node.process.kill()
            node.process.wait()


def _two_nodes(directory: Path, started: list[Node], job: list[str], *, max_restarts: int, hang_timeout: str,
               late_s: float = 0.0, error_files: tuple[Path, Path] | None = None,
               handler: str = "arrivals") -> tuple[Node, Node]:
    port = free_port()

    def node(host: bool) -> Node:
        args = ["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", "0" if host else "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "hang",
                "--max-restarts", str(max_restarts), "--hang-timeout", hang_timeout, "--c10d-handler", handler, *job]
        env = {"TORCHX_EXT_RDZV_IS_HOST": "1" if host else "0"}
        if error_files is not None:  # each replica's own, as a scheduler gives it
            env["TORCHELASTIC_ERROR_FILE"] = str(error_files[0 if host else 1])
        return Node(directory, "host" if host else "peer", args, env)

    host = node(True)
    started.append(host)
    time.sleep(late_s)
    peer = node(False)
    started.append(peer)
    return host, peer


def _stack_block(output: str) -> str:
    assert STACKS_BEGIN in output and STACKS_END in output, output[-3000:]
    return output[output.index(STACKS_BEGIN): output.index(STACKS_END)]


def _first_step_after(directory: Path, moment: float) -> float:
    after = [entry[2] for entry in _history(directory) if entry[2] > moment]
    assert after, _history(directory)
    return float(after[0]) - moment


def test_a_rank_hung_alive_is_found_its_stack_and_its_peers_are_logged_first_and_the_job_goes_on(
        tmp_path: Path, started: list[Node]) -> None:
    host, peer = _two_nodes(tmp_path, started, [HUNG, str(tmp_path), "12", "0.2", "1", "4"], max_restarts=2,
                            hang_timeout="10")
    assert host.wait(120) == 0, host.output()[-3000:]
    assert peer.wait(30) == 0, peer.output()[-3000:]

    history = _history(tmp_path)
    assert [entry[0] for entry in history] == list(range(12)), history
    waited = _first_step_after(tmp_path, float((tmp_path / "hung_at").read_text()))
    assert 10 <= waited <= 10 + 15, waited
    for node, where in ((peer, "threading.py"), (host, "in all_reduce")):
        output = node.output()
        assert HANG_LINE in output, output[-3000:]
        block = _stack_block(output)
        assert where in block and "(main thread)" in block, block
        # Every stack was written before a worker of this node was stopped by its agent or ended by
        # its peer's (gloo: a connection reset), whichever came first.
        ends = [output.find(mark) for mark in ("Closing process", "failed (exitcode")]
        assert output.index(STACKS_END) < min(end for end in ends if end >= 0), output[-3000:]
    # The hung rank's own frame, in the script, at the line where it waits.
    assert 'hung.py", line' in _stack_block(peer.output())


def test_a_worker_that_overruns_its_own_timer_is_ended_with_every_stack_logged_and_its_launcher_goes_on(
        tmp_path: Path) -> None:
    done = run_launcher(["--nproc-per-node", "2", "--max-restarts", "1", HUNG, str(tmp_path), "10", "0.2", "1", "4",
                         "3"], env=clean_env(TORCHELASTIC_ENABLE_FILE_TIMER="1"), timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]  # torchrun's agent ends itself here: exit -9
    # Rank 0, waiting in the all-reduce inside its own timed step, overran too.
    assert "timer: rank " in output and "rank 1 (local rank 1, pid" in output, output[-3000:]
    assert "overran its expires() block" in output
    assert "hung.py" in _stack_block(output)
    assert HANG_LINE not in output  # the worker's timer decided, not the watchdog
    assert [entry[0] for entry in _history(tmp_path)] == list(range(10))
    assert _first_step_after(tmp_path, float((tmp_path / "hung_at").read_text())) <= 3 + 15


def test_the_watchdog_leaves_a_step_the_worker_timed_itself_to_its_timer(tmp_path: Path) -> None:
    # Each rank sits 12 s in one C call inside expires(after=60); the watchdog's 4 s would call that a hang.
    done = run_launcher(["--nproc-per-node", "2", "--hang-timeout", "4", QUIET, "timed_sleep", "12", "60"],
                        env=clean_env(TORCHELASTIC_ENABLE_FILE_TIMER="1"), timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and output.count("done") == 2, output[-3000:]
    assert HANG_LINE not in output and STACKS_BEGIN not in output


def test_a_loop_that_spends_its_time_in_one_call_is_no_hang(tmp_path: Path) -> None:
    # 20 s at the same torch.mm call on every sample, with a 4 s timeout: the call returns many times a second.
    done = run_launcher(["--nproc-per-node", "2", "--hang-timeout", "4", QUIET, "one_call_site", "20"], timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and output.count("done") == 2, output[-3000:]
    assert HANG_LINE not in output


def test_a_thousand_jittered_steps_are_no_hang(tmp_path: Path) -> None:
    done = run_launcher(["--nproc-per-node", "2", "--hang-timeout", "30", QUIET, "jitter", "1000", "0.01"],
                        timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and output.count("done") == 2, output[-3000:]
    assert HANG_LINE not in output


def test_long_python_work_on_one_rank_and_a_long_wait_for_a_late_node_are_no_hang(
        tmp_path: Path, started: list[Node]) -> None:
    # Both at once, each with a 30 s timeout: 90 s of Python work on rank 0 while rank 1 waits in a
    # barrier; a job whose second node comes 90 s late (the first waits in the rendezvous).
    work = Node(tmp_path, "python-work", ["--nproc-per-node", "2", "--hang-timeout", "30", QUIET, "python_work", "90"])
    started.append(work)
    host, peer = _two_nodes(tmp_path, started, [QUIET, "jitter", "20", "0.05"], max_restarts=0, hang_timeout="30",
                            late_s=90)
    for node in (work, host, peer):
        assert node.wait(120) == 0, node.output()[-3000:]
        assert "done" in node.output() and HANG_LINE not in node.output(), node.output()[-3000:]


def test_attempts_that_keep_hanging_at_the_same_point_stop_before_the_restarts_run_out(tmp_path: Path) -> None:
    done = run_launcher(["--nproc-per-node", "2", "--max-restarts", "8", "--hang-timeout", "3",
                         HUNG, str(tmp_path), "10", "0.2", "1", "4", "0", "always"], timeout=180)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]  # exit_codes.STUCK: schedulers do not start it again
    last = output.strip().splitlines()[-1]
    assert "stopped restarting: 3 attempts in a row hung at the same point" in last, last
    assert "5 restarts in place left unused" in last and "(no restart left" not in last
    assert 3 <= output.count(f"[torchx_ext.launcher] {HANG_LINE}") <= 4, output[-5000:]


@pytest.mark.parametrize("handler", ["arrivals", "torch"])  # ours, and torch's own c10d handler
def test_a_node_one_attempt_behind_stops_with_the_node_that_stopped_restarting(tmp_path: Path, started: list[Node],
                                                                            handler: str) -> None:
    # Each node counts its own attempts (kept beside its replica's error file for the next
    # launcher) and judges "the same point" by its own looks, so nodes may disagree by one attempt.
    # Here the store's host has two hung attempts behind it and the peer none: the host stops at the
    # next hang, and the peer, which would restart, stops with it (exit 3) instead of failing on
    # the closed rendezvous or on the store the host took with it (exit 1, which schedulers retry).
    job = [HUNG, str(tmp_path / "checkpoints"), "10", "0.2", "1", "2", "0", "always"]
    (tmp_path / "checkpoints").mkdir()
    error_files = (tmp_path / "host.json", tmp_path / "peer.json")
    for _ in range(2):
        host, peer = _two_nodes(tmp_path, started, job, max_restarts=0, hang_timeout="3", error_files=error_files,
                                handler=handler)
        assert (host.wait(120), peer.wait(30)) == (1, 1), (host.output()[-2000:], peer.output()[-2000:])
    Path(f"{error_files[1]}.attempts").unlink()  # the peer's replica starts afresh (a new pod)

    host, peer = _two_nodes(tmp_path, started, job, max_restarts=3, hang_timeout="3", error_files=error_files,
                            handler=handler)
    assert host.wait(120) == 3, host.output()[-3000:]
    assert peer.wait(30) == 3, peer.output()[-3000:]
    host_line, peer_line = (node.output().strip().splitlines()[-1] for node in (host, peer))
    assert "stopped restarting: 3 attempts in a row hung at the same point" in host_line, host_line
    assert "stopped restarting: 3 attempts in a row hung" in peer_line and "seen by another node" in peer_line, \
        peer_line
    assert json.loads(error_files[1].read_text())["message"]["errorCode"] == 3


def test_where_py_spy_is_installed_each_ranks_stack_carries_its_native_frames(tmp_path: Path) -> None:
    # py-spy is a test dependency: the launcher finds it on PATH (the test venv's bin first).
    venv_bin = str(Path(sys.executable).parent)
    assert shutil.which("py-spy", path=venv_bin), "py-spy is in requirements-test.txt: install the test dependencies"
    env = clean_env()
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', os.defpath)}"
    done = run_launcher(["--nproc-per-node", "2", "--max-restarts", "0", "--hang-timeout", "3",
                         HUNG, str(tmp_path), "10", "0.2", "1", "2"], env=env, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    block = _stack_block(output)
    assert block.count("native frames (py-spy):") == 2, block[-5000:]
    native = block[block.index("native frames (py-spy):"):]
    assert "all_reduce (torch/distributed/distributed_c10d.py" in native and "(libtorch" in native, native[:3000]
    assert max(len(line) for line in block.splitlines()) <= 250, block  # C++ names shortened


@pytest.mark.parametrize("workers", ["2", "1"])
def test_attempts_that_keep_failing_at_the_same_point_stop_before_the_restarts_run_out(tmp_path: Path,
                                                                                       workers: str) -> None:
    # Rank 1 raises at step 3 of every attempt. With 2 workers rank 0 fails too (gloo's reset) at
    # the same point; with 1 (rank 0 raises) the failing worker is the only one.
    done = run_launcher(["--nproc-per-node", workers, "--max-restarts", "8", "--hang-timeout", "3",
                         HUNG, str(tmp_path), "10", "0.2", str(int(workers) - 1), "3", "0", "fails"], timeout=180)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]  # exit_codes.STUCK: schedulers do not start it again
    last = output.strip().splitlines()[-1]
    assert "stopped restarting: 3 attempts in a row failed at the same point" in last, last
    assert f"the last: rank {int(workers) - 1}: ValueError: bad batch at step 3)" in last, last  # not gloo's reset
    assert "5 restarts in place left unused" in last, last
    assert output.count("fails at step 3") == 3, output[-5000:]


def test_a_failed_rank_slow_to_exit_counts_as_failed_not_as_hung_on_every_node(tmp_path: Path,
                                                                              started: list[Node]) -> None:
    # Rank 1 raises at step 3 of every attempt and then takes 5 s to exit (an exit handler), longer
    # than the hang timeout; rank 0, on the other node, waits in the step's all-reduce. The failure
    # came first: each node counts the attempt as failed (and says so when it stops), whether or not
    # the stillness that followed was declared a hang.
    job = [HUNG, str(tmp_path), "10", "0.2", "1", "3", "0", "fails-slowly"]
    host, peer = _two_nodes(tmp_path, started, job, max_restarts=8, hang_timeout="3")
    assert host.wait(180) == 3, host.output()[-3000:]
    assert peer.wait(30) == 3, peer.output()[-3000:]
    for node in (host, peer):
        last = node.output().strip().splitlines()[-1]
        assert "stopped restarting: 3 attempts in a row failed at the same point" in last, node.output()[-3000:]
        assert "the last: rank 1: ValueError: bad batch at step 3" in last, last
        assert "5 restarts in place left unused" in last, last  # one per attempt, not one per failure and hang


def test_a_one_node_launcher_whose_attempt_failed_where_the_two_before_did_exits_3_and_says_so(
        tmp_path: Path) -> None:
    # A scheduler's restarts (a one-node job has none in place): each launcher reads what the one
    # before it left beside the replica's error file.
    error_file = tmp_path / "error.json"
    codes, lasts = [], []
    for _ in range(3):
        done = run_launcher(["--nproc-per-node", "1", "--max-restarts", "0", "--hang-timeout", "3",
                             HUNG, str(tmp_path), "10", "0.2", "0", "2", "0", "fails"],
                            env=clean_env(TORCHELASTIC_ERROR_FILE=str(error_file)), timeout=120)
        codes.append(done.returncode)
        lasts.append((done.stdout + done.stderr).strip().splitlines()[-1])
    assert codes == [1, 1, 3], (codes, lasts)
    assert "stopped restarting: 3 attempts in a row failed at the same point" in lasts[-1], lasts
    assert "the last: rank 0: ValueError: bad batch at step 2" in lasts[-1], lasts
    report = json.loads(error_file.read_text())["message"]
    assert report["errorCode"] == 3 and report["message"].startswith("stopped restarting: 3 attempts"), report
    assert "bad batch at step 2" in report["extraInfo"]["py_callstack"], report


@pytest.mark.parametrize("given", ["0", "-3", "soon", "nan"])
def test_a_hang_timeout_that_is_not_seconds_or_off_is_refused_before_anything_starts(tmp_path: Path,
                                                                                      given: str) -> None:
    done = run_launcher(["--nproc-per-node", "2", "--hang-timeout", given, HUNG, str(tmp_path), "3", "0", "1", "-1"],
                        timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == (f"error: invalid --hang-timeout {given!r}: expected seconds from 1 to 604800 (no rank "
                         "moving that long is a hang), or off"), done.stderr[-2000:]
    assert not (tmp_path / "checkpoint.json").exists()

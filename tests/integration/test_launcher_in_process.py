"""The launcher's ``main(argv)`` called inside a user's own process: again, in a forked child,
next to the caller's own forkserver, and leaving the caller's environment as it found it."""

from __future__ import annotations

import os
from pathlib import Path

from tests.integration.launcher_helpers import REPORT, last_json_line, reports, run_caller

# A user's script: calls main() in its own process, then prints what it saw as one JSON line.
CALLER = '''
import json
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing import forkserver

from torchx_ext.launcher.cli import main

REPORT, OUT, SCENARIO = sys.argv[1:4]


def launch(name, nproc="2"):
    os.makedirs(os.path.join(OUT, name))
    return main(["--nproc-per-node", nproc, REPORT, os.path.join(OUT, name)])


def caller_state():
    handlers = {sig.name: repr(signal.getsignal(sig)) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    return {"environ": dict(os.environ), "handlers": handlers}


def in_child(name):
    """main() in a child forked from this process; returns the child's exit status."""
    pid = os.fork()
    if pid == 0:
        code = launch(name)
        sys.stdout.flush()
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


if __name__ == "__main__":
    seen = {}
    if SCENARIO == "twice":
        before = caller_state()
        seen["codes"] = [launch("first"), launch("second", nproc="1")]
        after = caller_state()
        seen["environ_changed"] = {
            name: [before["environ"].get(name), after["environ"].get(name)]
            for name in set(before["environ"]) | set(after["environ"])
            if before["environ"].get(name) != after["environ"].get(name)
        }
        seen["handlers"] = [before["handlers"], after["handlers"]]
    elif SCENARIO == "fork":
        seen["codes"] = [launch("parent"), in_child("child")]
    elif SCENARIO == "callers-forkserver":
        forkserver.ensure_running()
        server = forkserver._forkserver._forkserver_pid
        seen["codes"] = [launch("beside"), in_child("child")]
        seen["server_kept"] = forkserver._forkserver._forkserver_pid == server and alive(server)
        worker = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(0,))
        worker.start()
        worker.join()
        seen["server_still_serves"] = worker.exitcode == 0
    print(json.dumps(seen))
'''


def test_main_runs_twice_in_one_process_and_gives_back_its_environment(tmp_path: Path) -> None:
    result = run_caller(tmp_path, CALLER, REPORT, str(tmp_path), "twice")

    seen = last_json_line(result)
    assert seen["codes"] == [0, 0], result.stderr[-3000:]
    assert [rank["sum"] for rank in reports(tmp_path / "first")] == [3.0, 3.0]
    assert [rank["sum"] for rank in reports(tmp_path / "second")] == [1.0]
    # torchrun exports OMP_NUM_THREADS=1 only for more than one rank: the first call's value
    # reaches neither the caller nor the second call's worker.
    assert [rank["omp_num_threads"] for rank in reports(tmp_path / "first")] == ["1", "1"]
    assert [rank["omp_num_threads"] for rank in reports(tmp_path / "second")] == [None]
    assert seen["environ_changed"] == {}
    before, after = seen["handlers"]
    assert after == before  # Ctrl+C in the caller is its own again, not torchelastic's handler


def test_main_runs_in_a_child_forked_after_main_ran_in_the_parent(tmp_path: Path) -> None:
    result = run_caller(tmp_path, CALLER, REPORT, str(tmp_path), "fork")

    assert last_json_line(result)["codes"] == [0, 0], result.stderr[-3000:]
    assert [rank["sum"] for rank in reports(tmp_path / "parent")] == [3.0, 3.0]
    assert [rank["sum"] for rank in reports(tmp_path / "child")] == [3.0, 3.0]


def test_main_leaves_the_callers_own_forkserver_alone_and_a_forked_child_runs_too(tmp_path: Path) -> None:
    result = run_caller(tmp_path, CALLER, REPORT, str(tmp_path), "callers-forkserver")

    seen = last_json_line(result)
    assert seen["codes"] == [0, 0], result.stderr[-3000:]
    assert [rank["sum"] for rank in reports(tmp_path / "beside")] == [3.0, 3.0]
    assert [rank["sum"] for rank in reports(tmp_path / "child")] == [3.0, 3.0]
    assert seen["server_kept"] and seen["server_still_serves"]


# torch's test_run.py runs test_launch_elastic_agent_raise_exception (the launcher raises; unittest
# keeps the error) and then test_launch_elastic_multiple_agents (a multiprocessing.Process runs
# the launcher) in one process: the child collected the parent's store server and aborted.
RAISED_THEN_FORKED = '''
import multiprocessing
import socket
import sys

from torchx_ext.launcher import WorkerFailedError, launch
from torchx_ext.launcher.cli import main


def fails() -> None:
    raise RuntimeError("on purpose")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call_and_keep_the_error() -> None:
    try:
        launch(fails, nnodes=1, rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", monitor_interval=0.5)
    except WorkerFailedError as error:
        kept = [error, sys._getframe()]  # a cycle, as unittest's assertRaises keeps the error
        kept.append(kept)


if __name__ == "__main__":
    for _ in range(int(sys.argv[1])):
        call_and_keep_the_error()
        child = multiprocessing.Process(target=main, args=([
            "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-conf", "last_call_timeout=1",
            "--monitor-interval", "0.5", "-m", "json.tool", "--help"],))
        child.start()
        child.join()
        print("child exit", child.exitcode, flush=True)
'''


def test_a_child_forked_after_a_call_that_raised_runs_the_launcher_to_the_end(tmp_path: Path) -> None:
    # 3 times a run (it aborted every time before); TORCHX_EXT_AGENT_REPEATS=20 by hand.
    repeats = int(os.environ.get("TORCHX_EXT_AGENT_REPEATS", "3"))
    result = run_caller(tmp_path, RAISED_THEN_FORKED, str(repeats), timeout=60 * repeats)

    exits = [line for line in result.stdout.splitlines() if line.startswith("child exit")]
    assert exits == ["child exit 0"] * repeats, (exits, result.stderr[-3000:])

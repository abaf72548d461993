"""local_cwd's warm start (``-cfg warm=true``): a job's processes are forks of a resident
interpreter that imported torch, with the job's own state, as a cold job's would be; only its
user may ask it; it can be shown, stopped, killed and replaced, and a job never needs it. The
conformance and fault suites run warm too (their ``local_cwd-warm`` case)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import TORCHX, still_there, torchx
from tests.warm_helpers import ensure_warm
from torchx_ext.warm import client
from torchx_ext.warm.protocol import receive, send
from torchx_ext.warm.server import environment_key, socket_path

JOBS = Path(__file__).parent / "jobs"
TRICKY = "a 'quoted' \"value\" with $HOME, a ; and\na newline"


def run_state_job(cwd: Path, warm: bool, warm_pid: int) -> dict[str, object]:
    """The process state process_state.py printed, run through the CLI with a umask and an
    core-size limit of the test's own, on CPU 1 only."""

    def as_a_user_sets_it() -> None:
        os.umask(0o027)
        resource.setrlimit(resource.RLIMIT_CORE, (1234567, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        os.sched_setaffinity(0, {1})

    ran = subprocess.run(
        [*TORCHX, "run", "-s", "local_cwd", "-cfg", f"warm={str(warm).lower()}", "dist.ddp", "-j", "1x1",
         "--env", f"WARM_PID={warm_pid}", "--script", str(JOBS / "process_state.py"), "--", "one arg", "$two"],
        cwd=cwd, env={**os.environ, "TRICKY": TRICKY}, capture_output=True, text=True, timeout=120,
        preexec_fn=as_a_user_sets_it)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    line = next(line for line in (ran.stdout + ran.stderr).splitlines() if "STATE " in line)
    return dict(json.loads(line.split("STATE ", 1)[1]))


def test_a_warm_jobs_processes_are_forks_of_the_warm_interpreter_with_the_state_a_cold_one_gets(
    tmp_path: Path
) -> None:
    warm_pid = ensure_warm()
    cold = run_state_job(tmp_path, warm=False, warm_pid=warm_pid)
    warm = run_state_job(tmp_path, warm=True, warm_pid=warm_pid)

    assert (cold.pop("warm"), warm.pop("warm")) == (False, True)
    cold_launcher, warm_launcher = dict(cold.pop("launcher")), dict(warm.pop("launcher"))  # type: ignore[call-overload]
    # The launcher itself a fork, showing in /proc what an exec would: its command, the job's marker.
    assert (cold_launcher.pop("forked"), warm_launcher.pop("forked")) == (False, True)
    assert warm_launcher == cold_launcher
    assert warm_launcher["argv"][1:] == ["-m", "torchx_ext.launcher", "--rdzv-backend"], warm_launcher
    assert warm_launcher["marker"] and warm_launcher["stdin"] == "/dev/null"
    assert warm == cold
    assert warm["value"] == TRICKY and warm["argv"] == ["one arg", "$two"]
    assert (warm["umask"], warm["core"], warm["cpus"]) == ("0o27", 1234567, [1])
    assert warm["own_session"] and warm["stdin"] == "/dev/null" and warm["environ_has_marker"]


def connect_as(uid: int, path: Path) -> str:
    """What a process of ``uid`` gets when it asks the warm interpreter at ``path`` for its status."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.setgid(uid)
            os.setuid(uid)
            # The protocol itself, not the client (which would refuse a server of another uid first).
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.connect(str(path))
                send(connection, {"op": "status"})
                said = json.dumps(receive(connection)[0])
        except (OSError, ValueError) as error:
            said = f"{type(error).__name__}: {error}"
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        said = answer.read()
    os.waitpid(pid, 0)
    return said


@pytest.mark.skipif(os.getuid() != 0, reason="becoming another user needs root")
def test_another_users_connection_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A runtime directory another user could reach (pytest's own temporary ones are root's alone).
    runtime = Path(tempfile.mkdtemp(prefix="torchx-ext-runtime-"))
    runtime.chmod(0o711)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    try:
        ensure_warm()
        _refused_to(socket_path())
    finally:
        client.stop()
        shutil.rmtree(runtime, ignore_errors=True)


def _refused_to(path: Path) -> None:
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert connect_as(65534, path).startswith("PermissionError")  # the socket's mode, and its directory's
    # Even where the modes would let it in, the interpreter answers only its own user.
    path.parent.chmod(0o711)
    path.chmod(0o666)
    try:
        said = connect_as(65534, path)
    finally:
        path.chmod(0o600)
        path.parent.chmod(0o700)
    assert json.loads(said) == {"error": "uid 65534 is not this warm interpreter's user (0): refused"}, said


def test_status_stop_a_killed_interpreter_and_a_changed_torchx_ext(tmp_path: Path) -> None:
    pid = ensure_warm()
    shown = torchx("warm", "status")
    assert f"warm interpreter pid {pid}" in shown.stdout, shown.stdout + shown.stderr
    stopped = torchx("warm", "stop")
    assert f"stopped the warm interpreter (pid {pid})" in stopped.stdout, stopped.stdout + stopped.stderr
    assert still_there(lambda: [str(pid)] if _not_zombie(pid) else [], 10) == []
    assert "no warm interpreter runs" in torchx("warm", "status").stdout

    # Killed: the next warm job starts cold, as if none had run, and starts a new one.
    pid = ensure_warm()
    os.kill(pid, signal.SIGKILL)
    ran = torchx("run", "-s", "local_cwd", "-cfg", "warm=true", "dist.ddp", "-j", "1x1", "--script",
                 str(JOBS / "process_state.py"), cwd=tmp_path)
    assert ran.returncode == 0 and "STATE " in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    assert ensure_warm(timeout_s=30) != pid

    # A changed torchx_ext (or torch, or venv) is another key, so another interpreter: the next
    # warm job finds none (as above). Shown on a copy: the checkout is shared with tests that run
    # beside this one (CI's engine lane), whose keys must not change under them.
    package = tmp_path / "torchx_ext"
    shutil.copytree(Path(client.__file__).parents[1], package, ignore=shutil.ignore_patterns("__pycache__"))
    key = environment_key(package=package)
    module = package / "warm" / "client.py"
    before = module.stat()
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert environment_key(package=package) != key
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert environment_key(package=package) == key


def test_it_ends_by_itself_once_idle(tmp_path: Path) -> None:
    path = tmp_path / "idle.sock"
    server = subprocess.Popen([*TORCHX[:1], "-m", "torchx_ext.warm", "serve", str(path)],
                              env={**os.environ, "TORCHX_EXT_WARM_IDLE_S": "3"})
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline and server.poll() is None, "it never listened"
        time.sleep(0.1)
    assert client.ask(path, {"op": "status"})["pid"] == server.pid
    assert server.wait(timeout=20) == 0
    assert not path.exists()
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as probe:
        probe.connect(str(path))


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

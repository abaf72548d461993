"""The warm interpreter: one resident process per user and Python environment that has imported
torch and our launcher, and forks each local job's supervisor (whose replicas' launchers are
forks of it in turn) on request, so that no process of the job imports torch again.

It listens on a Unix socket of mode 0600 in the user's runtime directory (``$XDG_RUNTIME_DIR``,
else ``/tmp/torchx_ext-UID``, a directory of mode 0700 that must be the user's), named by a key
of the interpreter, torch and torchx_ext's files (``environment_key``): a new venv, torch or
torchx_ext is another socket, and so another server; the old one ends once idle. It answers
only a peer of its own uid (``SO_PEERCRED``), runs one thread (a fork keeps only the calling
one), never touches CUDA, and ends after ``IDLE_S`` without a request.

On a Slurm allocation's node it is a task of a step of that allocation (``serve-slurm``,
started by the slurm scheduler for ``-cfg warm=true``), with a socket per allocation and node
(``slurm_socket_path``), and forks the launchers of the job's step programs there (``attach``).

The protocol, one request per connection: 4 bytes of length, then a JSON object (``op``: run,
attach, status or stop), with the job's stdin, stdout and stderr passed as descriptors
(SCM_RIGHTS); the answer is one JSON object. An attached connection stays open: see ``attach.py``.
"""

from __future__ import annotations

import hashlib
import os
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from torchx_ext.warm.protocol import job_state, receive, send

IDLE_S = 600.0
"""How long it waits for a request before it ends (``$TORCHX_EXT_WARM_IDLE_S`` when its starter set it)."""
IDLE_ENV = "TORCHX_EXT_WARM_IDLE_S"
PRELOAD = ("torch", "torch.distributed", "torch.distributed.elastic.agent.server.local_elastic_agent",
           "torch.distributed.elastic.rendezvous.dynamic_rendezvous", "torchx_ext.launcher.cli",
           # The supervisor's own imports (not itself: it runs as __main__).
           "torchx_ext.schedulers.local.records", "torchx_ext.schedulers.common.log_files", "torchx_ext.numa.bind")
REQUEST_TIMEOUT_S = 10.0


def runtime_dir(node_local: bool = False) -> Path:
    """The user's directory for the socket, made (0700) if missing; refused if it is a link, not
    the user's, or open to anyone else (in /tmp another user could have made it first).
    ``node_local``: always ``/tmp/torchx_ext-UID`` (on a Slurm node, the submitting shell's
    ``$XDG_RUNTIME_DIR`` need not exist)."""
    import stat

    runtime = None if node_local else os.environ.get("XDG_RUNTIME_DIR")
    path = Path(runtime) / "torchx_ext" if runtime else Path(f"/tmp/torchx_ext-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a directory of yours alone (owner {info.st_uid}, mode "
                              f"{info.st_mode & 0o7777:o}): the warm interpreter's socket goes nowhere others may reach")
    return path


def environment_key(cgroup: bool = True, package: Path | None = None) -> str:
    """What a warm interpreter must share with the job: the interpreter and its prefix, torch's
    files and torchx_ext's (a changed file of either makes another key), and its control group
    (not on a Slurm node, where each step has its own). No import of torch."""
    import importlib.util

    parts = [os.path.realpath(sys.executable), sys.prefix, sys.version, str(os.getuid()), _cgroup() if cgroup else ""]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        torch_dir = Path(spec.origin).parent
        parts += [str(torch_dir), *(str(_mtime(torch_dir / name)) for name in ("__init__.py", "version.py"))]
    package = package or Path(__file__).resolve().parents[1]  # torchx_ext's (a test's copy of it)
    parts += [str(package), *(f"{path}:{_mtime(path)}" for path in sorted(package.rglob("*.py")))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _cgroup() -> str:
    """The control group: a fork stays in its parent's (an ``srun --pty`` session's ends with it)."""
    try:
        return Path("/proc/self/cgroup").read_text()
    except OSError:
        return ""


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def socket_path(key: str | None = None) -> Path:
    return runtime_dir() / f"warm-{key or environment_key()}.sock"


def slurm_socket_path(allocation: str, node: str, key: str | None = None) -> Path:
    """The socket of an allocation's warm interpreter on ``node``: by allocation and node (a test
    cluster runs several nodes on one host), on the node's own disk."""
    return runtime_dir(node_local=True) / f"warm-slurm{allocation}-{node}-{key or environment_key(cgroup=False)}.sock"


def serve(path: Path, idle_s: float | None = None, activity: Path | None = None) -> None:
    """Preload, listen at ``path`` and fork what is asked, until ``idle_s`` pass without a request,
    a stop, or another server took ``path``; with ``activity``, a file the servers of several
    nodes touch on each request: idle only once none of them had one (an allocation's warm step
    is one, whose nodes end together)."""
    import importlib

    idle_s = float(os.environ.get(IDLE_ENV, IDLE_S)) if idle_s is None else idle_s
    if not _only_one(path):
        return  # another one runs (or starts) for this key
    for name in PRELOAD:
        importlib.import_module(name)
    from torchx_ext.warm import fork

    fork.check_forkable()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staged = path.with_name(f"{path.name}.{os.getpid()}")
    staged.unlink(missing_ok=True)
    mask = os.umask(0o177)
    try:
        listener.bind(str(staged))
    finally:
        os.umask(mask)
    os.chmod(staged, 0o600)
    listener.listen(64)
    os.replace(staged, path)  # the newest server answers; an older one sees that and ends
    ours = path.stat().st_ino
    signal.signal(signal.SIGCHLD, _reap)
    started, served, last = time.time(), 0, time.monotonic()
    while True:
        ready, _, _ = select.select([listener], [], [], min(5.0, max(0.0, idle_s - (time.monotonic() - last))))
        if not ready:
            if _ATTACHED:
                # On a Slurm node, what it forked for a job's step lives in the warm step, which
                # ends (killing them) once its servers end: not idle, nor gone, before they have.
                last = time.monotonic()
                continue
            idle = time.monotonic() - last >= idle_s and _age(activity) >= idle_s
            if idle or not _still_ours(path, ours):
                break
            continue
        connection, _ = listener.accept()
        connection.settimeout(REQUEST_TIMEOUT_S)  # one stalled client must not hold the others
        last = time.monotonic()
        if activity is not None:
            activity.touch()
        with connection:
            try:
                stop = _answer(connection, listener, {"pid": os.getpid(), "started": started, "served": served,
                                                      "python": sys.executable, "key": path.stem.removeprefix("warm-"),
                                                      "attached": len(_ATTACHED)})
                served += 1
            except Exception as error:  # one bad request ends only itself
                print(f"warm: a request failed: {error!r}", file=sys.stderr, flush=True)
                continue
        if stop:
            break
    if _still_ours(path, ours):
        path.unlink(missing_ok=True)


def _age(activity: Path | None) -> float:
    """Seconds since ``activity`` was touched (infinite without one)."""
    try:
        return time.time() - activity.stat().st_mtime if activity is not None else float("inf")
    except OSError:
        return float("inf")


_LOCK: list[int] = []


def _only_one(path: Path) -> bool:
    """Whether this is the one server of ``path``'s key: it holds the key's lock while it lives."""
    import fcntl

    descriptor = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return False
    _LOCK.append(descriptor)
    return True


def runs_or_starts(path: Path) -> bool:
    """Whether a server of ``path``'s key holds its lock (it runs, or is importing torch)."""
    import fcntl

    try:
        descriptor = os.open(path.with_suffix(".lock"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(descriptor)
    return False


def _still_ours(path: Path, inode: int) -> bool:
    try:
        return path.stat().st_ino == inode
    except OSError:
        return False


_ATTACHED: set[int] = set()
"""The guardians of attached launchers (``attach.py``) that still run."""


def _reap(*_: object) -> None:
    while True:
        try:
            pid = os.waitpid(-1, os.WNOHANG)[0]
        except ChildProcessError:
            return
        if pid == 0:
            return
        _ATTACHED.discard(pid)


def _answer(connection: socket.socket, listener: socket.socket, status: dict[str, Any]) -> bool:
    """Answers one request; whether it asked the server to stop."""
    credentials = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    uid = int(credentials[1])
    # Read before judging: a peer refused before it finished sending would see a broken pipe, not why.
    request, descriptors = receive(connection)
    from torchx_ext.warm.fork import NoRoom

    try:
        op = request.get("op")
        if uid != os.getuid():
            send(connection, {"error": f"uid {uid} is not this warm interpreter's user ({os.getuid()}): refused"})
        elif op == "status":
            send(connection, status)
        elif op == "stop":
            send(connection, {"stopped": status["pid"]})
            return True
        elif op == "run" and len(descriptors) == 3:
            from torchx_ext.warm.fork import run_module_in_fork

            child = run_module_in_fork(request["module"], list(request["args"]),
                                       streams=(descriptors[0], descriptors[1], descriptors[2]), **job_state(request))
            send(connection, {"pid": child.pid})
        elif op == "attach" and len(descriptors) == 3:
            from torchx_ext.warm.attach import guard

            # Until the guardian is counted, its end must wait: else it would be counted after it was reaped.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            try:
                _ATTACHED.add(guard(connection, listener, request, (descriptors[0], descriptors[1], descriptors[2])))
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        else:
            send(connection, {"error": f"unknown request {op!r} (or its streams missing)"})
    except NoRoom as error:
        send(connection, {"error": str(error)})
    finally:
        for descriptor in descriptors:
            os.close(descriptor)
    return False

"""The program each slurm task runs: one replica of a role, on the node Slurm gave it.

``python -m torchx_ext.schedulers.slurm.step JOB_DIR ROLE`` (the srun step the driver runs):

- reads the role from ``request.json`` and applies torchx's macros with what only the task
  knows: the app id (``SLURM_JOB_ID``) and the replica id (``SLURM_PROCID``: one task per node);
- points the replica at the rendezvous host: the first node of the step by its ``NodeAddr``,
  as ``scontrol`` reports it (node names need not resolve), on a port node rank 0 picks free
  and publishes in the job directory, and tells the launcher that the replica of node rank 0,
  and only it, hosts the store;
- says which CPUs Slurm gave the task (the launcher plans inside them, never wider);
- runs the replica with its output passed on to the files ``srun --output/--error`` write,
  indexed by arrival time, and both streams into ``<role>-<k>.log``;
- records where it ran and how it ended (``.started``, ``.exit``): what is left to read once
  the controller has forgotten the job and accounting is off;
- kills the replica when its launcher stops touching its liveness file (frozen or hung: Slurm
  notices nothing while slurmd answers), so the task ends, ``--kill-on-bad-exit`` ends the step and
  the driver runs it again within ``max_retries``, as for a lost replica.

Its ``--enough-succeeded``, ``--record-*`` and ``--requeued*`` subcommands are what batch scripts
written before the driver (format 1 and 2 requests: a bash retry loop) call; the driver calls the
same functions directly.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Union

from torchx_ext.error_file import ErrorReport, read_error_file, write_error_file
from torchx_ext.exit_codes import STUCK
from torchx_ext.liveness import FileWatch, is_spare, runs_our_launcher
from torchx_ext.numa.cpulist import format_cpulist
from torchx_ext.replica_env import (ALLOCATED_NODES_ENV, ERROR_FILE_ENV, LAUNCHER_MODULE, LIVENESS_FILE_ENV, RANK0_HOST_ENV,
                                    RDZV_HOST_ENV, RDZV_IS_HOST_ENV, RDZV_PORT_ENV, REPLICA_ENV)
from torchx_ext.schedulers.common.files import write_atomically
from torchx_ext.schedulers.common.log_files import IndexedLog
from torchx_ext.schedulers.common.proc import kill_tree
from torchx_ext.schedulers.slurm.allocation import ALLOCATION_ENV, APP_ID_ENV
from torchx_ext.schedulers.slurm.driver_core import exit_code
from torchx_ext.schedulers.slurm.records import SlurmJobDir, StepEnd, first_failure, step_ended
from torchx_ext.schedulers.slurm.request import SlurmRoleRequest

if TYPE_CHECKING:
    from torchx_ext.warm.attach import AttachedProcess

START_ORDER_WAIT_S = 10.0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--enough-succeeded"]:
        return 0 if enough_succeeded(SlurmJobDir(Path(argv[1])), argv[2]) else 1
    if argv[:1] == ["--record-failure"]:
        record_failure(SlurmJobDir(Path(argv[1])), argv[2])
        return 0
    if argv[:1] == ["--requeued"]:
        print(record_requeue(SlurmJobDir(Path(argv[1])), argv[2], int(argv[3])))
        return 0
    if argv[:1] == ["--record-restart"]:
        record_app_restart(SlurmJobDir(Path(argv[1])), argv[2])
        return 0
    if argv[:1] == ["--requeued-app"]:
        print(record_app_requeue(SlurmJobDir(Path(argv[1])), int(argv[2])))
        return 0
    job_dir, role_name = argv
    job = SlurmJobDir(Path(job_dir))
    role = job.read_request().role(role_name)
    if role is None:
        raise SystemExit(f"slurm step: no role {role_name!r} in {job.request}")
    if job.cancelled.exists() and ALLOCATION_ENV in os.environ:
        # Cancelled while srun waited for the allocation's nodes, where cancel could not see the step yet.
        return 143
    replica_id = int(os.environ.get("SLURM_PROCID", "0"))
    node = os.environ.get("SLURMD_NODENAME", "")
    job.exit(role.name, replica_id).unlink(missing_ok=True)  # a requeued job runs again
    logs = {
        "stdout": IndexedLog(job.log(role.name, replica_id, "stdout"), passthrough=1),
        "stderr": IndexedLog(job.log(role.name, replica_id, "stderr"), passthrough=2),
        "combined": IndexedLog(job.log(role.name, replica_id, "combined")),
    }

    def say(message: str) -> None:
        data = f"[torchx_ext.slurm] {message}\n".encode()
        now = time.time()
        logs["stderr"].write(data, now)
        logs["combined"].write(data, now)

    rdzv_host, own_address = node_addresses(os.environ.get("SLURM_STEP_NODELIST", node), node, say)
    # torchx's rank 0 is the first role's replica 0, for every role: its het group 0's first node.
    first_role = job.read_request().roles[0].name == role.name
    if first_role:
        rank0_host = rdzv_host
    elif ALLOCATION_ENV in os.environ:
        # Each role is a step of its own in an allocation, whose node list is not the first role's.
        rank0_host = published_rank0(job, say) or rdzv_host
    else:
        rank0_host = node_addresses(os.environ.get("SLURM_JOB_NODELIST_HET_GROUP_0")
                                    or os.environ.get("SLURM_JOB_NODELIST", node), node, say)[0]
    argv_, env = replica_command(role, job, replica_id, rank0_host, rdzv_host)
    # The address rank 0's workers are reached at (MASTER_ADDR): the node's own, not its name.
    env.setdefault("PET_LOCAL_ADDR", own_address)
    say(f"{role.name}/{replica_id} on {node} ({own_address}): rendezvous at {rdzv_host} (node rank 0 hosts it); "
        f"{cpus_given()}")
    port = rendezvous_port(job, role.name, replica_id, say)
    if port is not None:
        env[RDZV_PORT_ENV] = port

    def started() -> None:
        write_atomically(job.started(role.name, replica_id), json.dumps({"node": node, "at": time.time()}))
        if replica_id == 0 and first_role:
            write_atomically(job.rank0_address, rdzv_host)
        if replica_id == 0 and port is not None:
            # Published once node rank 0's agent has its pid: see rendezvous_port.
            write_atomically(job.rendezvous_port(role.name), port)

    # On the node's own disk: the job directory is shared (NFS), whose stalls are not the replica's.
    liveness = Path(tempfile.gettempdir()) / f"torchx_ext-{app_id()}-{role.name}-{replica_id}.alive"
    liveness.unlink(missing_ok=True)
    env[LIVENESS_FILE_ENV] = str(liveness)

    def frozen(silent_s: float) -> None:
        message = f"gave no sign of life for {silent_s:.1f} s (frozen or hung) and was killed"
        say(f"{role.name}/{replica_id}: its launcher {message}")
        write_error_file(job.error_file(role.name, replica_id), ErrorReport(message=message, error_code=137),
                         replace=True)

    spare_mark = job.spare(role.name, replica_id)
    warm = warm_socket(job)
    try:
        while True:
            code = run_replica(argv_, env, role.cwd, logs, started=started, liveness=(str(liveness), frozen),
                               spare_mark=spare_mark, warm=warm, say=say,
                               held_gpus=job.read_request().allocation_gpus_per_node)
            restarts = job.read_replica_restarts(role.name, replica_id)
            if not role.policy.restarts_in_place or code == 0 or _stopped_by_slurm or restarts >= role.policy.max_retries:
                break
            if code == STUCK and runs_our_launcher(argv_[0], argv_[1:]):
                say(f"{role.name}/{replica_id} stopped restarting (its attempts kept hanging at one point): "
                    "not started again")
                break
            if not controller_answers():
                say(f"{role.name}/{replica_id} is not started again here: this node cannot reach the Slurm "
                    "controller (cut off?), which gives the node up and requeues the job")
                break
            # The lost replica alone is started again here (a hot spare's waits as the next spare);
            # the others re-rendezvous with it.
            report = read_error_file(job.error_file(role.name, replica_id))
            ended = step_ended(StepEnd(code, time.time(), node), report.message if report else "")
            write_atomically(job.replica_restarts(role.name, replica_id), str(restarts + 1))
            record_first_of_incident(job.last_failure(role.name), f"replica {role.name}/{replica_id} ({node}) {ended}",
                                     killed=code < 0)
            say(f"{role.name}/{replica_id} {ended}; starting it again in place "
                f"({restarts + 1} of max_retries {role.policy.max_retries})")
            liveness.unlink(missing_ok=True)
    finally:
        liveness.unlink(missing_ok=True)
        spare_mark.unlink(missing_ok=True)
    for log in logs.values():
        log.close()
    write_atomically(job.exit(role.name, replica_id), json.dumps({"exit_code": code, "at": time.time(), "node": node}))
    return exit_code(code)


CONSEQUENCE_S, INCIDENT_S = 5.0, 30.0
STORE_LOST = "lost the rendezvous store"
"""How a launcher says its store went away (watchdog.py): the consequence of losing the store's
host, not a cause."""


def record_first_of_incident(path: Path, text: str, killed: bool = False) -> None:
    """Say ``text`` as what failed last, unless it is the consequence of another replica's
    failure said just before (``CONSEQUENCE_S``; ``INCIDENT_S`` for a lost store: its host was
    killed, its peers' store is gone). A lost store is never the cause: a peer that saw its
    connection close may say so before the host's own end is said, which then replaces it. A
    replica ``killed`` by a signal is always a cause: no peer's failure kills it."""
    # Serialized: the host and its peer end within milliseconds of each other, on their nodes.
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _replaces_what_was_said(path, text, killed):
            write_atomically(path, text)


def _replaces_what_was_said(path: Path, text: str, killed: bool) -> bool:
    try:
        said = path.read_text()
        age = time.time() - path.stat().st_mtime
    except OSError:
        return True
    other_replica = said.split(" (")[0] != text.split(" (")[0]
    if killed:
        return True
    if other_replica and STORE_LOST in text and age < INCIDENT_S:
        return False
    return not (other_replica and STORE_LOST not in said and age < CONSEQUENCE_S)


def app_id() -> str:
    """The job's app id: its Slurm job id, or the one its driver gave it in an allocation."""
    return os.environ.get(APP_ID_ENV) or os.environ.get("SLURM_JOB_ID", "")


def warm_socket(job: SlurmJobDir) -> Path | None:
    """The socket of this node's warm interpreter, for a job run in an allocation with
    ``-cfg warm=true``; None otherwise."""
    allocation = os.environ.get(ALLOCATION_ENV)
    if not allocation or not job.read_request().warm_step:
        return None
    from torchx_ext.warm.server import slurm_socket_path

    try:
        return slurm_socket_path(allocation, os.environ.get("SLURMD_NODENAME", ""))
    except OSError:
        return None  # no directory of ours on this node: the launcher starts anew


def controller_answers(timeout_s: float = 3.0) -> bool:
    """Whether this node reaches the Slurm controller (``squeue`` about this job)."""
    try:
        return subprocess.run(["squeue", "-h", "-j", os.environ.get("SLURM_JOB_ID", ""), "-o", "%T"],
                              capture_output=True, timeout=timeout_s).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def enough_succeeded(job: SlurmJobDir, role_name: str) -> bool:
    """Whether at least ``min_replicas`` of the role's replicas ended with code 0: an elastic
    role that carried on without the others (the batch script asks once its step has ended)."""
    role = job.read_request().role(role_name)
    if role is None:
        return False
    ends = [job.read_step_end(role.name, k) for k in range(role.num_replicas)]
    return sum(end is not None and end.exit_code == 0 for end in ends) >= role.policy.min_replicas


def record_failure(job: SlurmJobDir, role_name: str) -> None:
    """Keep what failed the role's step (its first replica to fail) before the batch script runs
    it again, which overwrites every replica's end."""
    text = _failure(job, role_name)
    if text:
        write_atomically(job.last_failure(role_name), text)


def record_requeue(job: SlurmJobDir, role_name: str, max_retries: int) -> int:
    """Count a run of the batch script that Slurm requeued (after a node failed: the step could
    not say so itself) as one restart of the role, and say what failed in the run before; the
    restarts so far, or a SystemExit once they exceed ``max_retries``."""
    restarts = job.read_restarts(role_name) + 1
    failure = _failure(job, role_name)
    write_atomically(job.last_failure(role_name), f"{REQUEUED}{': ' + failure if failure else ''}")
    if restarts > max_retries:
        raise SystemExit(f"slurm step: Slurm requeued the job, restart {restarts} of role {role_name}, "
                         f"over its max_retries ({max_retries}); not running it again")
    write_atomically(job.restarts(role_name), str(restarts))
    return restarts


def record_app_restart(job: SlurmJobDir, role_name: str) -> None:
    """Before every role's step runs again (torchx's APPLICATION on several roles): what failed
    the app, and one restart more, counted on the role that failed it."""
    record_failure(job, role_name)
    write_atomically(job.restarts(role_name), str(job.read_restarts(role_name) + 1))


def record_app_requeue(job: SlurmJobDir, max_restarts: int) -> int:
    """A requeued run of a batch script that restarts the app as a whole, counted on its first
    role; the app's restarts so far, or a SystemExit once they exceed ``max_restarts``."""
    roles = [role.name for role in job.read_request().roles]
    restarts = sum(job.read_restarts(role) for role in roles) + 1
    if restarts > max_restarts:
        write_atomically(job.last_failure(roles[0]), REQUEUED)
        raise SystemExit(f"slurm step: Slurm requeued the job, restart {restarts} of the app, over its "
                         f"max_retries ({max_restarts}); not running it again")
    record_requeue(job, roles[0], max_restarts)
    return restarts


# SLURM_RESTART_COUNT does not say why.
REQUEUED = "Slurm requeued the job (a node failure, a preemption or scontrol requeue)"


def _failure(job: SlurmJobDir, role_name: str) -> str:
    role = job.read_request().role(role_name)
    if role is None:
        return ""
    ends = {(role.name, k): job.read_step_end(role.name, k) for k in range(role.num_replicas)}
    failed = first_failure(ends)
    end = ends[failed] if failed is not None else None
    if failed is None or end is None:
        return ""
    report = read_error_file(job.error_file(*failed))
    return f"replica {role.name}/{failed[1]} ({end.node}) {step_ended(end, report.message if report else '')}"


def replica_command(role: SlurmRoleRequest, job: SlurmJobDir, replica_id: int, rank0_host: str,
                    rdzv_host: str) -> tuple[list[str], dict[str, str]]:
    """The replica's argv and environment, macros applied as torchx's schedulers apply them;
    ``rank0_host``: torchx's rank 0 (the first role's replica 0), ``rdzv_host``: the role's own
    replica 0, which hosts the role's rendezvous store."""
    from torchx import specs

    values = specs.macros.Values(img_root="", app_id=app_id(), replica_id=str(replica_id),
                                 rank0_env=RANK0_HOST_ENV)
    resolved = values.apply(specs.Role(name=role.name, image="", entrypoint=role.entrypoint, args=list(role.args),
                                       env=dict(role.env)))
    env = {
        **os.environ,
        RANK0_HOST_ENV: rank0_host,
        RDZV_HOST_ENV: rdzv_host,
        RDZV_IS_HOST_ENV: "1" if replica_id == 0 else "0",
        ERROR_FILE_ENV: str(job.error_file(role.name, replica_id)),
        REPLICA_ENV: f"{role.name}/{replica_id}",
        **resolved.env,
    }
    if role.policy.carries_on_short:
        env[ALLOCATED_NODES_ENV] = os.environ.get("SLURM_STEP_NUM_NODES", str(role.num_replicas))
    return [resolved.entrypoint, *resolved.args], env


def published_rank0(job: SlurmJobDir, say: Callable[[str], None], wait_s: float = START_ORDER_WAIT_S) -> str:
    """The first role's node rank 0, once its step program published it (empty after ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return job.rank0_address.read_text().strip()
        except OSError:
            if time.monotonic() >= deadline:
                say(f"the first role's replica 0 did not start within {wait_s:.0f} s: {RANK0_HOST_ENV} is this role's own")
                return ""
            time.sleep(0.1)


def node_addresses(nodelist: str, node: str, say: Callable[[str], None]) -> tuple[str, str]:
    """The ``NodeAddr`` of the first node of ``nodelist`` (Slurm's hostlist form) and of
    ``node``, as ``scontrol`` reports them; a node's name where it cannot tell."""
    try:
        names = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               check=True, timeout=30).stdout.split()
        shown = subprocess.run(["scontrol", "show", "node", "-o", ",".join(dict.fromkeys([names[0], node]))],
                               capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError, IndexError) as error:
        say(f"warning: cannot ask scontrol for the nodes' addresses ({error}); using their names")
        return nodelist.split(",")[0], node
    addresses = dict(re.findall(r"\bNodeName=(\S+).*?\bNodeAddr=(\S+)", shown))
    return addresses.get(names[0], names[0]), addresses.get(node, node)


def rendezvous_port(job: SlurmJobDir, role: str, replica_id: int, say: Callable[[str], None]) -> str | None:
    """The role's rendezvous port: picked free by its node rank 0, which publishes it in the job
    directory once its agent runs (``main``); the other nodes wait for it (and so start after node
    rank 0). None: node rank 0 said nothing in time (the launcher's ``--rdzv-port`` then holds)."""
    # A fixed port (torchx's 29500) is taken by the first job on a node that several jobs share.
    # The wait also orders the agents: torchelastic numbers them by (host address, pid), so on
    # nodes that share a host, as on a test cluster of several slurmd on one machine, starting
    # after node rank 0's agent has started gives this agent the later pid and replica k the
    # ranks k*nproc... (published before node rank 0 started, either could start first).
    published = job.rendezvous_port(role)
    if replica_id == 0:
        published.unlink(missing_ok=True)  # a requeued job picks a new one
        with socket.socket() as probe:
            probe.bind(("", 0))
            return str(probe.getsockname()[1])
    deadline = time.monotonic() + START_ORDER_WAIT_S
    while not published.exists():
        if time.monotonic() > deadline:
            say(f"node rank 0 published no rendezvous port in {START_ORDER_WAIT_S:.0f} s; using --rdzv-port")
            return None
        time.sleep(0.05)
    return published.read_text().strip()


def cpus_given() -> str:
    """What Slurm gave this task, and whether the task's affinity agrees."""
    cpus = os.sched_getaffinity(0)
    expected = os.environ.get("SLURM_CPUS_PER_TASK") or os.environ.get("SLURM_CPUS_ON_NODE")
    text = f"CPUs {format_cpulist(cpus)} (SLURM_CPUS_PER_TASK={os.environ.get('SLURM_CPUS_PER_TASK', '-')}, " \
           f"SLURM_CPUS_ON_NODE={os.environ.get('SLURM_CPUS_ON_NODE', '-')}); the launcher plans inside them"
    if expected and expected.isdigit() and len(cpus) > int(expected):
        text += (f"; warning: the task may use {len(cpus)} CPUs but Slurm allocated {expected}: Slurm binds no tasks "
                 "here (TaskPlugin task/affinity or task/cgroup), so replicas sharing a node may overlap")
    return text


Replica = Union["subprocess.Popen[bytes]", "AttachedProcess"]

_stopped_by_slurm = False
"""Slurm signalled the step (scancel, a time limit): its replica is not started again."""


def run_replica(argv: list[str], env: dict[str, str], cwd: str, logs: dict[str, IndexedLog],
                started: Callable[[], None],
                liveness: tuple[str, Callable[[float], None]] | None = None, spare_mark: Path | None = None,
                warm: Path | None = None, say: Callable[[str], None] | None = None, held_gpus: int = 0) -> int:
    """Runs the replica to its end, passing on its output and the signals Slurm sends; its exit
    code (negative: the signal that killed it). ``started`` is called once it runs. With
    ``liveness`` (a file, and what to do first), a replica whose launcher touched the file once and
    then not for 10 s is frozen: it is killed with everything it started. ``spare_mark`` exists
    while the liveness file says the launcher waits as a hot spare. ``warm``: the socket of the
    node's warm interpreter, which forks our launcher when it answers (``start_replica``) and the
    step's GPUs are all ``held_gpus`` of the node; ``say`` tells the replica's log which it was."""
    if argv[:3] != [sys.executable, "-m", LAUNCHER_MODULE]:
        warm = None  # only our launcher, on this interpreter, finds what it needs imported there
    elif warm is not None and (partial := partial_gpus(env, held_gpus)):
        if say is not None:
            say(f"its launcher starts anew: {partial}")
        warm = None
    process, stdout, stderr = start_replica(argv, env, cwd, warm)
    if warm is not None and say is not None:
        from torchx_ext.warm.attach import AttachedProcess

        say(f"its launcher (pid {process.pid}) is a fork of this node's warm interpreter"
            if isinstance(process, AttachedProcess) else "no warm interpreter answers on this node yet: its launcher starts anew")
    started()

    def forward(signum: int, _frame: object) -> None:
        global _stopped_by_slurm
        _stopped_by_slurm = _stopped_by_slurm or signum in (signal.SIGTERM, signal.SIGINT)
        # A forked launcher's end is read by the main loop alone: a handler reading it too could
        # take it from under the loop. Its send_signal says nothing once it has ended.
        if isinstance(process, subprocess.Popen) and process.poll() is not None:
            return
        process.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        signal.signal(signum, forward)
    selector = selectors.DefaultSelector()
    selector.register(stdout, selectors.EVENT_READ, "stdout")
    selector.register(stderr, selectors.EVENT_READ, "stderr")
    killed = False
    watch = FileWatch(liveness[0], pid=process.pid) if liveness is not None else None
    while selector.get_map():
        for key, _ in selector.select(timeout=1.0):
            data = os.read(key.fd, 1 << 16)
            if not data:
                selector.unregister(key.fileobj)
                continue
            now = time.time()
            logs[key.data].write(data, now)
            logs["combined"].write(data, now)
        silent = watch.frozen_for() if watch is not None and not killed else None
        if liveness is not None and silent is not None:
            liveness[1](silent)
            if isinstance(process, subprocess.Popen):
                kill_tree(process.pid)
            else:
                process.kill_tree()  # by its guardian, which alone knows the pid is still the launcher's
            killed = True
        if liveness is not None and spare_mark is not None:
            _mirror(spare_mark, not killed and is_spare(liveness[0]))
    if spare_mark is not None:
        spare_mark.unlink(missing_ok=True)
    for stream in (stdout, stderr):
        stream.close()
    return process.wait()




def partial_gpus(env: Mapping[str, str], held: int) -> str:
    """Why a fork of the warm interpreter might not see this step's GPUs as the step does ("": it
    sees them so). Where Slurm constrains devices, a step's ``CUDA_VISIBLE_DEVICES`` counts from 0
    among its own GPUs, and the warm step holds all ``held`` GPUs of the node in the allocation:
    the same numbers name other GPUs there, unless the step holds them all too, or its numbers are
    the node's own (``SLURM_STEP_GPUS``)."""
    visible = [gpu.strip() for gpu in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if gpu.strip()]
    own = [gpu.strip() for gpu in env.get("SLURM_STEP_GPUS", "").split(",") if gpu.strip()]
    if not visible or len(visible) == held or visible == own:
        return ""
    return (f"its step holds {len(visible)} of the node's {held} GPUs in the allocation, numbered "
            f"{','.join(visible)} among its own (the node's {','.join(own) or '?'}), which the warm interpreter's "
            "step numbers otherwise")


def start_replica(argv: list[str], env: dict[str, str], cwd: str, warm: Path | None) -> tuple[Replica, IO[bytes], IO[bytes]]:
    """The replica started, and the ends of its stdout and stderr pipes: our launcher (``argv``)
    forked by the node's warm interpreter at ``warm`` when one answers there (no import of
    torch); started anew without ``warm``, or without an answer."""
    if warm is not None:
        from torchx_ext.warm.attach import attach_module

        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        with open(os.devnull, "rb") as nothing:
            attached = attach_module(warm, LAUNCHER_MODULE, argv[3:], cwd=cwd, env=env,
                                     streams=(nothing.fileno(), out_write, err_write))
        os.close(out_write)
        os.close(err_write)
        if attached is not None:
            return attached, os.fdopen(out_read, "rb", buffering=0), os.fdopen(err_read, "rb", buffering=0)
        os.close(out_read)
        os.close(err_read)
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    return process, process.stdout, process.stderr


def _mirror(mark: Path, present: bool) -> None:
    if present != mark.exists():
        if present:
            mark.touch()
        else:
            mark.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())

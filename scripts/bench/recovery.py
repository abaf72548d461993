"""Time from losing a replica to the next completed training step, per scheduler and case, next
to torchrun's own behaviour measured in the same run; for a frozen replica, also the time until
the scheduler removed it (detection) apart from the next step (recovery).

The job is tests/conformance/jobs/checkpointed.py (a checkpoint every step) on two replicas of
one process. Cases: the replica that does not host the rendezvous store (``non-host``), the one
that does (``store host``), both with ``max_retries=1``; and an elastic ``-j 1:2x1`` job with
``max_retries=0`` that carries on without it (``elastic shrink``). A replica is lost the way the
conformance suite loses one on that scheduler (SIGKILL of the launcher and its workers on
local_cwd, ``docker kill`` on local_docker, the pod deleted on kubernetes, the launcher killed
on its node on slurm). torchrun's baseline:
two ``torchrun --max-restarts 3`` agents on this host (c10d, the first hosting the store); the
lost one is started again 1 s later, as a scheduler would (not in the elastic case).
Targets: non-host <= 15 s, store host <= 30 s, elastic shrink <= 30 s.

Frozen cases: every process of the replica stopped (SIGSTOP; ``docker pause`` on local_docker),
as a hung host looks: ``frozen non-host`` and ``frozen store host`` (``max_retries=1``),
``frozen elastic`` (``-j 1:2x1``, ``max_retries=0``), and ``frozen no retries`` (``2x1``,
``max_retries=0``: the time until the job is FAILED). Detection: until ``torchx status`` first
shows a change (the frozen replica restarted or failed). torchrun's agents: the victim's tree
stopped, nothing started again (no scheduler). Targets: frozen non-host <= 30 s, frozen store
host <= 45 s, frozen elastic <= 30 s, FAILED <= 60 s.

``frozen with spare``: ``-j 2x1 --spares 1`` (``max_retries=1``), the non-host training replica
frozen once the spare waits (``torchx status`` says so): the spare takes its place (target <= 15 s).
On Slurm in the cluster of the bench's own below (a third node for the spare); not on JobSet and
Volcano, which refuse hot spares. ``frozen slow pull`` and ``frozen slow pull spare`` (kubernetes,
job backend): the same, without and with a spare, where every pod started after the freeze pulls
its image for ``PULL_DELAY_S`` (the test kubelet's pull delay: about 2 GB at 50 MB/s): without a
spare the job waits for the replacement pod; with one it does not (target <= 15 s).

``hung rank`` and ``timer`` (``max_retries=1``): the job is tests/conformance/jobs/hung.py, whose
rank 1 waits for ever at step 5 of its first attempt, alive, while rank 0 waits in the step's
all-reduce. ``hung rank``: found by the launcher's hang watchdog (``--hang_timeout 30``; target
<= 45 s); ``timer``: each step inside torch's ``expires(after=5)`` with
``TORCHELASTIC_ENABLE_FILE_TIMER=1`` (target <= 20 s). Detected: until the hung replica's log
shows every rank's stack (the decision's first act). No torchrun baseline: it has no watchdog (the
peers wait for gloo's 30 minutes), and its timer server ends its own agent with the worker.

``torchft group``: a torchft job (``dist.hsdp``, 2 replica groups of 1, heartbeat timeout 1 s; the job
tests/conformance/jobs/torchft_steps.py, which needs ``pip install 'torchx_ext[ft]'``), group 1's
replica lost the engine's way: the time to the survivor's first step committed without it (target
<= 2 s: the heartbeat timeout + 1 s), the steps it did not commit, and when the lost group committed again,
having copied the survivor's weights. Beside it, ``non-host`` is today's restart (every replica
restarts, resuming from the last checkpoint: what was trained since is lost) and ``frozen with
spare`` the hot spare's. No torchrun baseline; not on JobSet and Volcano, which refuse torchft jobs,
nor on the test Slurm's two nodes (its three roles take a node each: tests/slurm/test_torchft.py).

``frozen starting`` (``max_retries=2``): the non-host replica is killed, and its replacement is stopped (SIGSTOP) as
soon as its processes appear, before its launcher has imported torch: the time from that freeze to
the next step (target <= 30 s). Measured on every scheduler: the bench sees a replica's processes on
this host (a container's too); no torchrun baseline (its agents notice no freeze).

``partitioned non-host`` (as root): on local_cwd each replica on a host of its own (a network
namespace, tests/fixtures/netns.py), the non-host replica's link taken down; it is started again
on a replacement host. On slurm a cluster of the bench's own whose three nodes are network
namespaces (tests/fixtures/slurm_netns.py, SlurmdTimeout and cred_expire 10 s), the non-host
replica's node cut off: Slurm gives it up and requeues the job onto the spare node, so the time
is bounded by those two settings. On local_docker and kubernetes the host side of the replica's
container's link (its veth) is taken down; the container started again gets a new one.
torchrun's baseline is not measured there. Slurm runs where
``SLURM_CONF`` names a cluster that answers (``bash scripts/slurm_cluster.sh start``);
local_docker and kubernetes (the test cluster, its pods on that engine; backends ``job``,
``jobset``, ``volcano``) where ``DOCKER_HOST`` answers (``export $(bash scripts/docker_engine.sh start)``).

    .venv/bin/python scripts/bench/recovery.py [--schedulers local_cwd,slurm,local_docker,kubernetes] [--timeout 90]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
# The suite's way to lose a replica on each scheduler.
from tests.conformance.conftest import (_docker_cut, _docker_kill, _docker_pause, _kube_cut,  # noqa: E402
                                       _kube_delete_pod, _kube_freeze, _local_freeze, _local_kill,
                                       _on_docker_replica, _on_kube_replica, _slurm_freeze, _slurm_kill,
                                       _slurm_replica_processes)
from torchx_ext.launcher.rendezvous.store_host import STORE_ADDR_ENV  # noqa: E402
from torchx_ext.schedulers.local.processes import marked_processes  # noqa: E402

JOB = REPO / "tests" / "conformance" / "jobs" / "checkpointed.py"
HUNG_JOB = REPO / "tests" / "conformance" / "jobs" / "hung.py"
STEPS, STEP_S = 60, 0.25
CASES = {"non-host": ("2x1", 1, 1), "store host": ("2x1", 1, 0), "elastic shrink": ("1:2x1", 0, 1),
         "frozen non-host": ("2x1", 1, 1), "frozen store host": ("2x1", 1, 0), "frozen elastic": ("1:2x1", 0, 1),
         "frozen no retries": ("2x1", 0, 1), "partitioned non-host": ("2x1", 1, 1), "frozen starting": ("2x1", 2, 1),
         "frozen with spare": ("2x1", 1, 1), "frozen slow pull": ("2x1", 1, 1), "frozen slow pull spare": ("2x1", 1, 1),
         "hung rank": ("2x1", 1, 1), "timer": ("2x1", 1, 1), "torchft group": ("1x1", 3, 1)}
TARGETS = {"non-host": 15.0, "store host": 30.0, "elastic shrink": 30.0, "frozen non-host": 30.0,
           "frozen store host": 45.0, "frozen elastic": 30.0, "frozen no retries": 60.0,
           "partitioned non-host": 30.0, "frozen starting": 30.0, "frozen with spare": 15.0,
           "frozen slow pull": float("inf"), "frozen slow pull spare": 15.0, "hung rank": 45.0, "timer": 20.0,
           "torchft group": 2.0}
PARTITIONED = {"partitioned non-host"}  # replicas or nodes on hosts of the bench's own
SPARES = {"frozen with spare": 1, "frozen slow pull spare": 1}  # dist.ddp --spares
SLOW_PULL = {"frozen slow pull", "frozen slow pull spare"}  # kubernetes (job backend) only
PULL_DELAY_S = 40.0
"""The test kubelet's pull of a replacement pod's image: about 2 GB at 50 MB/s, a node without it cached."""
HUNG: dict[str, dict[str, Any]] = {"hung rank": {"job_args": ("1", "5"), "hang_timeout": "30"},
                                    "timer": {"job_args": ("1", "5", "5"), "env": {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}}}
"""The hung job's cases: its arguments beyond the checkpoint's, and what dist.ddp is given."""
TORCHFT = {"torchft group"}
"""dist.hsdp, 2 replica groups of 1 (tests/conformance/jobs/torchft_steps.py), a heartbeat timeout of 1 s:
group 1's replica lost; timed to the survivor's first step committed without it (target: the heartbeat + 1 s)."""
FT_JOB = REPO / "tests" / "conformance" / "jobs" / "torchft_steps.py"
NO_BASELINE = PARTITIONED | SLOW_PULL | set(HUNG) | TORCHFT | {"frozen starting", "frozen with spare"}
FAILS = {"frozen no retries"}  # timed to FAILED, not to the next step


def history(directory: Path) -> list[list[float]]:
    try:
        return list(json.loads((directory / "checkpoint.json").read_text())["history"])
    except (OSError, ValueError, KeyError):
        return []


def wait_for_steps(directory: Path, count: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(history(directory)) >= count:
            return True
        time.sleep(0.05)
    return False


def recovery_s(directory: Path, lost_at: float, timeout_s: float) -> float | None:
    """Seconds from ``lost_at`` to the first step completed after it; None: none in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        after = [entry[2] for entry in history(directory) if entry[2] > lost_at + 0.3]
        if after:
            return after[0] - lost_at
        time.sleep(0.05)
    return None


@dataclass
class Target:
    """A scheduler as this run submits to it: its cfg, component arguments and way to lose a replica."""
    scheduler: str
    cfg: Callable[[Path], dict[str, Any]]
    kill: Callable[[str, str, int], None]
    freeze: Callable[[str, str, int], None]
    cut: Callable[[str, str, int], None] | None = None
    """Takes the replica's link down, where it has a network namespace of its own."""
    args: dict[str, Any] = field(default_factory=dict)
    mounts: Callable[[Path], list[str]] = lambda directory: []
    processes: Callable[[str, str, int], list[int]] | None = None
    """The replica's processes on this host, where the bench can see them (``frozen starting``)."""
    pull_delay: Callable[[float], None] | None = None
    """Makes every pod started from now on pull its image that long (kubernetes)."""


@contextmanager
def targets(names: list[str]) -> Iterator[dict[str, Target]]:
    """The schedulers of ``names`` that can run here, with their engines started for the run."""
    found: dict[str, Target] = {}
    with ExitStack() as stack:
        if "local_cwd" in names:
            found["local_cwd"] = Target("local_cwd", lambda d: {"log_dir": str(d / "logs")}, _local_kill, _local_freeze,
                                        processes=lambda app_id, role, replica: marked_processes(app_id, f"{role}/{replica}"))
        if "slurm" in names and slurm_answers():
            found["slurm"] = Target("slurm", lambda d: {"job_dir": str(d / "jobs")}, _slurm_kill, _slurm_freeze,
                                    processes=_slurm_replica_processes)
        docker = docker_client() if {"local_docker", "kubernetes"} & set(names) else None
        if docker is not None:
            from tests.fixtures.docker_engine import ensure_test_image

            stack.callback(docker.close)
            image = ensure_test_image(docker)
            args = {"image": image.name, "mounts": list(image.mount_options)}

            def bind(directory: Path) -> list[str]:
                return ["type=bind", f"src={directory}", f"dst={directory}"]

            if "local_docker" in names:
                found["local_docker"] = Target("local_docker", lambda d: {"cancel_grace": 5}, _docker_kill(docker),
                                               _docker_pause(docker), _docker_cut(docker), args, bind,
                                               processes=container_processes(_on_docker_replica, docker))
            if "kubernetes" in names:
                cluster = stack.enter_context(test_cluster(docker, image.paths))

                def pull_delay(seconds: float) -> None:
                    cluster.kubelet.pull_delay_s = seconds

                for backend in ("job", "jobset", "volcano"):
                    found[f"kubernetes/{backend}"] = Target("kubernetes", kube_cfg(backend), _kube_delete_pod,
                                                            _kube_freeze(docker), _kube_cut(docker),
                                                            {"image": image.name}, bind, pull_delay=pull_delay,
                                                            processes=container_processes(_on_kube_replica, docker))
        yield found


def container_processes(on_replica: Callable[[Any, Callable[[Any], None]], Callable[[str, str, int], None]],
                        docker: Any) -> Callable[[str, str, int], list[int]]:
    """The host pids of a replica's running container (a pod's, on kubernetes): the engine runs
    them on this host."""
    def processes(app_id: str, role: str, replica_id: int) -> list[int]:
        found: list[int] = []

        def add(container: Any) -> None:
            try:
                top = container.top()
            except Exception:  # gone or not running yet
                return
            column = top["Titles"].index("PID")
            found.extend(int(process[column]) for process in top["Processes"])

        on_replica(docker, add)(app_id, role, replica_id)
        return found

    return processes


def kube_cfg(backend: str) -> Callable[[Path], dict[str, Any]]:
    return lambda directory: {"cancel_grace": 5, "backend": backend}


def docker_client() -> Any:
    import docker

    try:
        client = docker.from_env()
        client.ping()
        return client
    except Exception:  # no engine: those schedulers are left out
        return None


@contextmanager
def test_cluster(docker: Any, node_mounts: tuple[str, ...]) -> Iterator[Any]:
    """The test suite's Kubernetes API server, its pods on ``docker``; KUBECONFIG points at it."""
    import kubernetes.config
    import kubernetes.config.kube_config

    from tests.kubernetes.apiserver import TestCluster

    cluster = TestCluster(docker, node_mounts=node_mounts)
    cluster.start()
    with tempfile.TemporaryDirectory(prefix="recovery-kube-") as scratch:
        kubeconfig = str(cluster.write_kubeconfig(Path(scratch) / "config"))
        os.environ["KUBECONFIG"] = kubeconfig
        for module in (kubernetes.config, kubernetes.config.kube_config):
            module.KUBE_CONFIG_DEFAULT_LOCATION = kubeconfig  # read at import, before ours
        try:
            yield cluster
        finally:
            cluster.stop()


@dataclass
class Measured:
    recovered_s: float | None
    """To the next completed step (to FAILED for the FAILS cases); None: not within the timeout."""
    detected_s: float | None = None
    """Frozen cases: to the first change ``torchx status`` shows."""
    more: str = ""
    """What else was measured, said after the figures (torchft: the steps not committed, the group back)."""
    not_started: str | None = None
    """Why nothing was measured: the job never trained on both replicas (a bench or set-up defect,
    not a recovery that failed)."""


def not_started(runner: Any, handle: str, timeout_s: float) -> Measured:
    """The job never reached its first steps on both replicas: what its status says."""
    status = runner.status(handle)
    said = "no status" if status is None else f"{status.state}" + (
        f": {status.msg.strip().splitlines()[0]}" if status.msg and status.msg.strip() else "")
    return Measured(None, not_started=f"no 4 steps on 2 replicas in {timeout_s:.0f} s ({said})")


def ours(target: Target, case: str, timeout_s: float) -> Measured:
    from torchx.runner import get_runner
    from torchx.specs import parse_app_handle

    from torchx_ext.components.dist import ddp

    j, max_retries, victim = CASES[case]
    with tempfile.TemporaryDirectory(prefix="recovery-") as scratch:
        directory = Path(scratch)
        os.chmod(directory, 0o777)  # containers write the checkpoint as whichever user they run as
        runner = get_runner()
        args = {**target.args, "mounts": [*target.args.get("mounts", []), *target.mounts(directory)]}
        spares = SPARES.get(case, 0)
        hung = HUNG.get(case, {})
        if hung.get("env"):
            args["env"] = {**args.get("env", {}), **hung["env"]}
        app = ddp(str(directory), str(STEPS), str(STEP_S), *hung.get("job_args", ()),
                  script=str(HUNG_JOB if hung else JOB), j=j, max_retries=max_retries, cpu=1, spares=spares,
                  hang_timeout=hung.get("hang_timeout"), **args)
        # Three pods of a CPU each do not fit the test cluster's 2-CPU node: each asks for 0.6.
        fitted = {"reserved_millicpu": 400} if spares and target.scheduler == "kubernetes" else {}
        handle = runner.run(app, target.scheduler, cfg={**target.cfg(directory), **fitted})
        try:
            if not wait_for_steps(directory, 4, timeout_s) or history(directory)[-1][1] != 2:
                return not_started(runner, handle, timeout_s)
            app_id = parse_app_handle(handle).app_id
            if spares and not wait_for_spares(runner, handle, spares, timeout_s):
                return Measured(None)  # no spare waited
            if case in SLOW_PULL:
                assert target.pull_delay is not None
                target.pull_delay(PULL_DELAY_S)  # the replacement pod's, not the first ones'
            if hung:
                hung_at = hung_since(directory, timeout_s)
                if hung_at is None:
                    return Measured(None)
                with ThreadPoolExecutor(1) as pool:  # the log is watched while the next step is awaited
                    logged = pool.submit(stacks_logged_s, runner, handle, victim, hung_at, timeout_s)
                    return Measured(recovery_s(directory, hung_at, timeout_s), logged.result())
            if case == "frozen starting":
                assert target.processes is not None
                frozen_at = freeze_replacement(target, app_id, victim, timeout_s)
                return Measured(None if frozen_at is None else recovery_s(directory, frozen_at, timeout_s))
            if not case.startswith(("frozen", "partitioned")):
                lost_at = time.time()
                target.kill(app_id, "checkpointed", victim)
                return Measured(recovery_s(directory, lost_at, timeout_s))
            before = status_key(runner, handle)
            lost_at = time.time()
            lose = target.freeze if case.startswith("frozen") else target.cut
            assert lose is not None
            lose(app_id, "checkpointed", victim)
            detected = changed_s(runner, handle, before, lost_at, timeout_s)
            if case in FAILS:
                return Measured(failed_s(runner, handle, lost_at, timeout_s), detected)
            return Measured(recovery_s(directory, lost_at, timeout_s), detected)
        finally:
            if target.pull_delay is not None:
                target.pull_delay(0.0)
            runner.cancel(handle)
            runner.close()
            if target.scheduler in ("local_docker", "kubernetes"):  # containers and pods stay until deleted
                from torchx.schedulers import get_scheduler_factories

                scheduler = get_scheduler_factories()[target.scheduler]("recovery")
                scheduler.delete(parse_app_handle(handle).app_id)
                scheduler.close()


def ft_steps(directory: Path, group: int) -> list[dict[str, Any]]:
    """Group ``group``'s steps so far, each with the time the bench first saw it (``seen``)."""
    try:
        lines = (directory / f"group{group}.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.endswith("}")]


class FtWatch:
    """Each group's steps of the torchft job as they arrive, stamped on this host's clock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.seen: list[list[tuple[float, dict[str, Any]]]] = [[], []]

    def poll(self) -> None:
        for group in (0, 1):
            steps = ft_steps(self.directory, group)
            now = time.time()
            self.seen[group] += [(now, step) for step in steps[len(self.seen[group]):]]

    def until(self, check: Callable[[], bool], timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if check():
                return time.time()
            time.sleep(0.02)
        return None

    def committed_after(self, group: int, since: float, start: str | None = None) -> list[dict[str, Any]]:
        return [step for at, step in self.seen[group]
                if at > since and step["committed"] and (start is None or step["start"] != start)]


def torchft_ours(target: Target, timeout_s: float) -> Measured:
    """dist.hsdp with 2 groups: group 1's replica lost the engine's way; the survivor's first committed
    step, the steps it did not commit, and when the lost group committed again."""
    from torchx.runner import get_runner
    from torchx.specs import parse_app_handle

    from torchx_ext.components.dist import hsdp

    with tempfile.TemporaryDirectory(prefix="recovery-ft-") as scratch, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        directory = Path(scratch)
        os.chmod(directory, 0o777)
        args = {**target.args, "mounts": [*target.args.get("mounts", []), *target.mounts(directory)],
                "env": {"RUST_LOG": "warn"}}  # torchft's INFO: ten lines a step
        app = hsdp(str(directory), str(STEP_S), script=str(FT_JOB), replicas=2, heartbeat_timeout="1s",
                   lighthouse_port=port, max_retries=3, cpu=1, **args)
        # Three pods of a CPU each do not fit the test cluster's 2-CPU node: each asks for 0.6.
        fitted = {"reserved_millicpu": 400} if target.scheduler == "kubernetes" else {}
        runner = get_runner()
        handle = runner.run(app, target.scheduler, cfg={**target.cfg(directory), **fitted})
        watch = FtWatch(directory)
        try:
            together = watch.until(lambda: all(sum(step["committed"] and step["participants"] == 2
                                                   for _, step in seen) >= 4 for seen in watch.seen), timeout_s)
            if together is None:
                return not_started(runner, handle, timeout_s)
            lost = watch.seen[1][-1][1]["start"]
            watch.poll()  # what was written before the loss is stamped before it
            lost_at = time.time()
            target.kill(parse_app_handle(handle).app_id, "replica_1", 0)
            survivor = watch.until(lambda: any(step["participants"] == 1 for step in watch.committed_after(0, lost_at)),
                                   timeout_s)
            back = watch.until(lambda: bool(watch.committed_after(1, lost_at, start=lost)), timeout_s)
            not_committed = sum(1 for at, step in watch.seen[0] if at > lost_at and not step["committed"])
            more = (f"; the survivor committed all but {not_committed} step{'s' if not_committed != 1 else ''}, "
                    f"the lost group committed again after {shown(None if back is None else back - lost_at)} "
                    "(no checkpoint: healed from the survivor)")
            return Measured(None if survivor is None else survivor - lost_at, more=more)
        finally:
            runner.cancel(handle)
            runner.close()
            if target.scheduler in ("local_docker", "kubernetes"):
                from torchx.schedulers import get_scheduler_factories

                scheduler = get_scheduler_factories()[target.scheduler]("recovery")
                scheduler.delete(parse_app_handle(handle).app_id)
                scheduler.close()


def hung_since(directory: Path, timeout_s: float) -> float | None:
    """When the hung job's rank stopped (its own clock: this host's), once it has."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return float((directory / "hung_at").read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


def stacks_logged_s(runner: Any, handle: str, replica: int, hung_at: float, timeout_s: float) -> float | None:
    """Seconds from ``hung_at`` until the replica's log holds every rank's stack (seen by polling)."""
    from torchx_ext.stack_request import STACKS_BEGIN

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(line.startswith(STACKS_BEGIN) for line in runner.log_lines(handle, "hung", replica)):
            return time.time() - hung_at
        time.sleep(0.2)
    return None


def wait_for_spares(runner: Any, handle: str, spares: int, timeout_s: float) -> bool:
    """Until ``torchx status`` shows ``spares`` hot spares waiting."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = runner.status(handle)
        if status is not None and f"{spares} hot spare{'s' if spares > 1 else ''} waiting" in status.msg:
            return True
        time.sleep(0.2)
    return False


def freeze_replacement(target: Target, app_id: str, victim: int, timeout_s: float) -> float | None:
    """Kill replica ``victim``, then stop its replacement as soon as its processes appear (its
    launcher still importing): when it was stopped, None if no replacement came in time."""
    assert target.processes is not None
    killed = set(target.processes(app_id, "checkpointed", victim))
    target.kill(app_id, "checkpointed", victim)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = [pid for pid in target.processes(app_id, "checkpointed", victim) if pid not in killed]
        if new:
            frozen_at = time.time()
            for _ in range(5):  # and what it starts in the next moments
                for pid in target.processes(app_id, "checkpointed", victim):
                    if pid not in killed:
                        _signal(pid, signal.SIGSTOP)
                time.sleep(0.05)
            return frozen_at
        time.sleep(0.02)
    return None


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def partitioned(case: str, timeout_s: float) -> Measured:
    """``case`` on local_cwd with every replica on a host of its own, one link taken down."""
    from torchx.runner import get_runner

    from tests.fixtures.netns import WRAPPER, hosts
    from torchx_ext.components.dist import ddp

    j, max_retries, victim = CASES[case]
    with tempfile.TemporaryDirectory(prefix="recovery-net-") as scratch, \
            hosts("rb", [1 + (replica == victim) for replica in range(2)], Path(scratch)) as net:
        directory = Path(scratch) / "checkpoints"
        directory.mkdir()
        app = ddp(str(directory), str(STEPS), str(STEP_S), script=str(JOB), j=j, max_retries=max_retries, cpu=1)
        role = app.roles[0]
        role.args = [str(WRAPPER), str(net.plan), "--", sys.executable, *role.args]
        role.entrypoint = sys.executable
        runner = get_runner()
        # local_cwd's store process listens on loopback unless told otherwise (docs/security.md):
        # the replicas reach it from their namespaces at the bridge's address.
        saved = os.environ.get(STORE_ADDR_ENV)
        os.environ[STORE_ADDR_ENV] = "0.0.0.0"
        try:
            handle = runner.run(app, "local_cwd", cfg={"log_dir": str(Path(scratch) / "logs")})
        finally:
            os.environ.pop(STORE_ADDR_ENV) if saved is None else os.environ.__setitem__(STORE_ADDR_ENV, saved)
        try:
            if not wait_for_steps(directory, 4, timeout_s) or history(directory)[-1][1] != 2:
                return not_started(runner, handle, timeout_s)
            before = status_key(runner, handle)
            lost_at = time.time()
            net.cut(next(host for host in net.hosts if host.name.endswith(f"-node{victim}-0")))
            detected = changed_s(runner, handle, before, lost_at, timeout_s)
            return Measured(recovery_s(directory, lost_at, timeout_s), detected)
        finally:
            runner.cancel(handle)
            runner.close()


def partitioned_slurm(case: str, timeout_s: float) -> Measured:
    """``case`` on a Slurm of the bench's own whose nodes are network namespaces
    (tests/fixtures/slurm_netns.py: SlurmdTimeout and cred_expire 10 s), one node's link taken
    down: Slurm gives the node up and requeues the job onto the spare node. For the spare cases
    (three nodes: two train, one waits) the replica is frozen instead."""
    from torchx.runner import get_runner

    from torchx.specs import parse_app_handle

    from tests.fixtures.slurm_cluster import job_processes
    from tests.fixtures.slurm_netns import netns_cluster
    from torchx_ext.components.dist import ddp

    j, max_retries, victim = CASES[case]
    saved = {key: os.environ.get(key) for key in ("SLURM_CONF", "GLOO_SOCKET_IFNAME")}
    with tempfile.TemporaryDirectory(prefix="recovery-slurm-net-") as scratch, \
            netns_cluster(Path(scratch) / "cluster") as cluster:
        os.environ["SLURM_CONF"] = str(cluster.conf)
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
        directory = Path(scratch) / "checkpoints"
        directory.mkdir()
        runner = get_runner()
        spares = SPARES.get(case, 0)
        app = ddp(str(directory), str(STEPS), str(STEP_S), script=str(JOB), j=j, max_retries=max_retries, cpu=1,
                  spares=spares)
        handle = runner.run(app, "slurm", cfg={"job_dir": str(Path(scratch) / "jobs")})
        try:
            if not wait_for_steps(directory, 4, timeout_s):
                return not_started(runner, handle, timeout_s)
            if spares and not wait_for_spares(runner, handle, spares, timeout_s):
                return Measured(None)
            status = runner.status(handle)
            node = next(replica.hostname for replica in status.roles[0].replicas if replica.id == victim)
            before = status_key(runner, handle)
            lost_at = time.time()
            if spares:
                _slurm_freeze(parse_app_handle(handle).app_id, "checkpointed", victim)
            else:
                cluster.net.cut(cluster.host(node))
            detected = changed_s(runner, handle, before, lost_at, timeout_s)
            return Measured(recovery_s(directory, lost_at, timeout_s), detected)
        finally:
            runner.cancel(handle)
            runner.close()
            for line in job_processes(parse_app_handle(handle).app_id):  # Slurm's remains on the cut node
                _signal_tree(int(line.split()[1].rstrip(":")), signal.SIGKILL)
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


# Partitioned on hosts of the bench's own; a container (local_docker, kubernetes) has a link of its own.
OWN_HOSTS: dict[str, Callable[[str, float], Measured]] = {"local_cwd": partitioned, "slurm": partitioned_slurm}


def status_key(runner: Any, handle: str) -> tuple[Any, ...]:
    """What of ``torchx status`` changes when a replica is removed or restarted."""
    status = runner.status(handle)
    if status is None:
        return ()
    replicas = tuple((replica.role, replica.id, replica.state) for role in status.roles for replica in role.replicas)
    return status.state, status.num_restarts, replicas


def changed_s(runner: Any, handle: str, before: tuple[Any, ...], since: float, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if status_key(runner, handle) != before:
            return time.time() - since
        time.sleep(0.2)
    return None


def failed_s(runner: Any, handle: str, since: float, timeout_s: float) -> float | None:
    from torchx.specs import AppState

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = runner.status(handle)
        if status is not None and status.state == AppState.FAILED:
            return time.time() - since
        time.sleep(0.2)
    return None


def torchrun(case: str, timeout_s: float) -> float | None:
    j, _, victim = CASES[case]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="recovery-torchrun-") as scratch:
        directory = Path(scratch)

        def agent(host: bool) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", j.split("x")[0].replace("-", ":"),
                 "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                 "--rdzv-id", "bench", "--rdzv-conf", f"is_host={str(host).lower()}", "--max-restarts", "3",
                 str(JOB), str(directory), str(STEPS), str(STEP_S)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        agents = [agent(True)]
        time.sleep(1)
        agents.append(agent(False))
        try:
            if not wait_for_steps(directory, 4, timeout_s) or history(directory)[-1][1] != 2:
                return None
            lost_at = time.time()
            if case.startswith("frozen"):
                _signal_tree(agents[victim].pid, signal.SIGSTOP)  # no scheduler removes it
                if case in FAILS:
                    survivor = agents[1 - victim]
                    try:
                        survivor.wait(timeout=timeout_s)
                    except subprocess.TimeoutExpired:
                        return None
                    return time.time() - lost_at if survivor.returncode else None
                return recovery_s(directory, lost_at, timeout_s)
            _signal_tree(agents[victim].pid, signal.SIGKILL)
            if case != "elastic shrink":
                time.sleep(1)
                agents[victim] = agent(victim == 0)
            return recovery_s(directory, lost_at, timeout_s)
        finally:
            for process in agents:
                _signal_tree(process.pid, signal.SIGKILL)
                _signal_tree(process.pid, signal.SIGCONT)
                process.wait()


def _signal_tree(root: int, signum: int) -> None:
    """Signal ``root`` and everything below it (torchrun's workers have sessions of their own)."""
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
        tree |= frontier
    for pid in tree:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def slurm_answers() -> bool:
    return bool(os.environ.get("SLURM_CONF")) and subprocess.run(
        ["sinfo", "-h"], capture_output=True).returncode == 0


def shown(seconds: float | None) -> str:
    return "did not recover" if seconds is None else f"{seconds:5.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedulers", default="local_cwd,slurm,local_docker,kubernetes")
    parser.add_argument("--cases", default=",".join(CASES), help=f"some of: {', '.join(CASES)}")
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    cases = [case.strip() for case in args.cases.split(",")]
    unknown = [case for case in cases if case not in CASES]
    if unknown:
        parser.error(f"unknown --cases {', '.join(unknown)}: valid ones are {', '.join(CASES)}")
    print(f"recovery: time from the loss to the next completed step ({STEPS} steps of {STEP_S} s, 2 replicas x 1)")
    baseline = {case: None if case in NO_BASELINE else torchrun(case, args.timeout) for case in cases}
    missed = 0
    with targets(args.schedulers.split(",")) as found:
        for case in cases:
            what = "to FAILED" if case in FAILS else "to the next step"
            before_ours = "not measured" if case in NO_BASELINE else f"{shown(baseline[case])} {what}"
            goal = "no target: without a spare" if TARGETS[case] == float("inf") else f"target <= {TARGETS[case]:.0f} s"
            print(f"{case:>18}: torchrun --max-restarts 3: {before_ours} ({goal})", flush=True)
            for name, target in found.items():
                if case in SLOW_PULL and name != "kubernetes/job":
                    print(f"{'':>18}  {name:>18}: not measured (the test kubelet's pull delay: kubernetes, "
                          "job backend)", flush=True)
                    continue
                if case in TORCHFT and name == "slurm":
                    print(f"{'':>18}  {name:>18}: not measured (its three roles take a node each, and the test cluster "
                          "has two: tests/slurm/test_torchft.py measures it on three hosts)", flush=True)
                    continue
                if case in TORCHFT and name in ("kubernetes/jobset", "kubernetes/volcano"):
                    print(f"{'':>18}  {name:>18}: not measured (refuses torchft jobs: a failure restarts every pod)",
                          flush=True)
                    continue
                if case in SPARES and name in ("kubernetes/jobset", "kubernetes/volcano"):
                    print(f"{'':>18}  {name:>18}: not measured (refuses hot spares: a failure restarts every pod)",
                          flush=True)
                    continue
                if case in PARTITIONED and name in OWN_HOSTS:
                    measured = OWN_HOSTS[name](case, args.timeout)
                elif case in SPARES and name == "slurm":  # a third node: the cluster of the bench's own
                    measured = partitioned_slurm(case, args.timeout)
                elif case in TORCHFT:
                    measured = torchft_ours(target, args.timeout)
                elif case == "frozen starting" and target.processes is None:
                    print(f"{'':>18}  {name:>18}: not measured (the bench cannot see its processes)", flush=True)
                    continue
                else:
                    measured = ours(target, case, args.timeout)
                seconds = measured.recovered_s
                ok = seconds is not None and seconds <= TARGETS[case]
                missed += not ok
                before = baseline[case]
                ratio = "" if seconds is None or before is None else f", ratio {seconds / before:.2f}"
                detected = "" if measured.detected_s is None and (case == "frozen starting" or not case.startswith(
                    ("frozen", "partitioned")) and case not in HUNG) \
                    else f"detected {shown(measured.detected_s)}, "
                if measured.not_started is not None:
                    print(f"{'':>18}  {name:>18}: the job did not start: {measured.not_started} MISSED", flush=True)
                    continue
                step = "next committed step" if case in TORCHFT else "next step"
                print(f"{'':>18}  {name:>18}: {detected}{what.split()[-1] if case in FAILS else step} "
                      f"{shown(seconds)}{ratio} {'ok' if ok else 'MISSED'}{measured.more}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

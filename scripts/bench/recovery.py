"""Time from losing a replica to the next completed training step, per scheduler and case, next
to torchrun's own behaviour measured in the same run.

The job is tests/conformance/jobs/checkpointed.py (a checkpoint every step) on two replicas of
one process. Cases: the replica that does not host the rendezvous store (``non-host``), the one
that does (``store host``), both with ``max_retries=1``; and an elastic ``-j 1:2x1`` job with
``max_retries=0`` that carries on without it (``elastic shrink``). A replica is lost the way the
conformance suite loses one on that scheduler (SIGKILL of the launcher and its workers on
local_cwd, ``docker kill`` on local_docker, the pod deleted on kubernetes, the launcher killed
on its node on slurm). torchrun's baseline:
two ``torchrun --max-restarts 3`` agents on this host (c10d, the first hosting the store); the
lost one is started again 1 s later, as a scheduler would (not in the elastic case).
Targets: non-host <= 15 s, store host <= 30 s, elastic shrink <= 30 s. Slurm runs where
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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
# The suite's way to lose a replica on each scheduler.
from tests.conformance.conftest import _docker_kill, _kube_delete_pod, _local_kill, _slurm_kill  # noqa: E402

JOB = REPO / "tests" / "conformance" / "jobs" / "checkpointed.py"
STEPS, STEP_S = 60, 0.25
CASES = {"non-host": ("2x1", 1, 1), "store host": ("2x1", 1, 0), "elastic shrink": ("1:2x1", 0, 1)}
TARGETS = {"non-host": 15.0, "store host": 30.0, "elastic shrink": 30.0}


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
    args: dict[str, Any] = field(default_factory=dict)
    mounts: Callable[[Path], list[str]] = lambda directory: []


@contextmanager
def targets(names: list[str]) -> Iterator[dict[str, Target]]:
    """The schedulers of ``names`` that can run here, with their engines started for the run."""
    found: dict[str, Target] = {}
    with ExitStack() as stack:
        if "local_cwd" in names:
            found["local_cwd"] = Target("local_cwd", lambda d: {"log_dir": str(d / "logs")}, _local_kill)
        if "slurm" in names and slurm_answers():
            found["slurm"] = Target("slurm", lambda d: {"job_dir": str(d / "jobs")}, _slurm_kill)
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
                                               args, bind)
            if "kubernetes" in names:
                stack.enter_context(test_cluster(docker, image.paths))
                for backend in ("job", "jobset", "volcano"):
                    found[f"kubernetes/{backend}"] = Target("kubernetes", kube_cfg(backend), _kube_delete_pod,
                                                            {"image": image.name}, bind)
        yield found


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
def test_cluster(docker: Any, node_mounts: tuple[str, ...]) -> Iterator[None]:
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
            yield
        finally:
            cluster.stop()


def ours(target: Target, case: str, timeout_s: float) -> float | None:
    from torchx.runner import get_runner
    from torchx.specs import parse_app_handle

    from torchx_ext.components.dist import ddp

    j, max_retries, victim = CASES[case]
    with tempfile.TemporaryDirectory(prefix="recovery-") as scratch:
        directory = Path(scratch)
        os.chmod(directory, 0o777)  # containers write the checkpoint as whichever user they run as
        runner = get_runner()
        args = {**target.args, "mounts": [*target.args.get("mounts", []), *target.mounts(directory)]}
        app = ddp(str(directory), str(STEPS), str(STEP_S), script=str(JOB), j=j, max_retries=max_retries, cpu=1,
                  **args)
        handle = runner.run(app, target.scheduler, cfg=target.cfg(directory))
        try:
            if not wait_for_steps(directory, 4, timeout_s) or history(directory)[-1][1] != 2:
                return None  # never ran on two replicas
            lost_at = time.time()
            target.kill(parse_app_handle(handle).app_id, "checkpointed", victim)
            return recovery_s(directory, lost_at, timeout_s)
        finally:
            runner.cancel(handle)
            runner.close()
            if target.scheduler in ("local_docker", "kubernetes"):  # containers and pods stay until deleted
                from torchx.schedulers import get_scheduler_factories

                scheduler = get_scheduler_factories()[target.scheduler]("recovery")
                scheduler.delete(parse_app_handle(handle).app_id)
                scheduler.close()


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
            _kill_tree(agents[victim].pid)
            if case != "elastic shrink":
                time.sleep(1)
                agents[victim] = agent(victim == 0)
            return recovery_s(directory, lost_at, timeout_s)
        finally:
            for process in agents:
                _kill_tree(process.pid)
                process.wait()


def _kill_tree(root: int) -> None:
    """SIGKILL ``root`` and everything below it (torchrun's workers have sessions of their own)."""
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
            os.kill(pid, signal.SIGKILL)
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
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    print(f"recovery: time from the loss to the next completed step ({STEPS} steps of {STEP_S} s, 2 replicas x 1)")
    baseline = {case: torchrun(case, args.timeout) for case in CASES}
    missed = 0
    with targets(args.schedulers.split(",")) as found:
        for case in CASES:
            print(f"{case:>15}: torchrun --max-restarts 3: {shown(baseline[case])} (target <= {TARGETS[case]:.0f} s)")
            for name, target in found.items():
                seconds = ours(target, case, args.timeout)
                ok = seconds is not None and seconds <= TARGETS[case]
                missed += not ok
                before = baseline[case]
                ratio = "" if seconds is None or before is None else f", ratio {seconds / before:.2f}"
                print(f"{'':>15}  {name:>18}: {shown(seconds)}{ratio} {'ok' if ok else 'MISSED'}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

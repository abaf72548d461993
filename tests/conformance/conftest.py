"""The schedulers the conformance suite runs against, and how to look at each one's leftovers.

Each entry says how to submit to it (scheduler name and cfg) and what of a job is still alive
after it ended. local_docker runs on the test engine (tests/fixtures/docker_engine.py) with the
offline test image; kubernetes, once per backend (Indexed Jobs, a JobSet, a Volcano Job), on the
fake API server of tests/kubernetes/apiserver (the real client over HTTP), whose kubelet runs the
pods on that engine, in the kubeconfig's namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.cases import EVERY_CASE
from tests.fixtures.netns import cut_link_of
from tests.fixtures.slurm_cluster import busy_nodes, hold_allocation, slurm_leftovers, warm_up
from tests.helpers import STATE_ROOT_ENV, alive, still_there
from tests.warm_helpers import ensure_warm
from torchx_ext.replica_env import REPLICA_ENV
from torchx_ext.schedulers.local.processes import marked_processes
from torchx_ext.schedulers.slurm.records import STATE_ROOT_ENV as SLURM_STATE_ROOT_ENV

JOBS = Path(__file__).parent / "jobs"


@dataclass
class SchedulerUnderTest:
    name: str
    cfg: dict[str, Any]
    leftovers: Callable[..., list[str]]
    """(app_id, settle_s=...) -> what of that job is still running (processes, containers, pods)
    after waiting up to ``settle_s`` for it to go (each scheduler has its own default; 0: now)."""
    component_args: dict[str, Any] = field(default_factory=dict)
    kill_replica: Callable[[str, str, int], None] = lambda app_id, role, replica_id: None
    """(app_id, role, replica_id): loses that replica the way the engine loses a node: SIGKILL of
    its launcher and workers, ``docker kill``, a deleted pod, the launcher killed on its node."""
    freeze_replica: Callable[[str, str, int], None] | None = None
    """(app_id, role, replica_id): freezes every process of that replica, as a hung host looks
    (SIGSTOP: a container's processes on local_docker and kubernetes, whose probes still run;
    the bench also pauses containers, ``_docker_pause``)."""
    shared_dir_mounts: Callable[[Path], list[str]] = lambda directory: []
    """--mounts that make ``directory`` the same path in every replica (a checkpoint directory)."""
    keeps_lost_replicas_end: bool = True
    """Its status names a lost replica and how it ended (a deleted or replaced pod leaves no record)."""
    store_outside_replicas: bool = False
    """The rendezvous store runs apart from the replicas: losing one restarts only that one."""


def _sigkill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _local_kill(app_id: str, role: str, replica_id: int) -> None:
    # The launcher and its workers (torchelastic puts them in sessions of their own).
    _sigkill(marked_processes(app_id, f"{role}/{replica_id}"))


def _local_freeze(app_id: str, role: str, replica_id: int) -> None:
    for pid in marked_processes(app_id, f"{role}/{replica_id}"):
        os.kill(pid, signal.SIGSTOP)


def _bind(directory: Path) -> list[str]:
    return ["type=bind", f"src={directory}", f"dst={directory}"]


def _on_docker_replica(client: Any, act: Callable[[Any], None]) -> Callable[[str, str, int], None]:
    """(app_id, role, replica_id) -> ``act`` on that replica's running container."""
    def on_replica(app_id: str, role: str, replica_id: int) -> None:
        labels = [f"torchx_ext.app_id={app_id}", f"torchx_ext.role={role}", f"torchx_ext.replica_id={replica_id}"]
        for container in client.containers.list(filters={"label": labels}):
            act(container)

    return on_replica


def _docker_kill(client: Any) -> Callable[[str, str, int], None]:
    return _on_docker_replica(client, lambda container: container.kill())


def _docker_pause(client: Any) -> Callable[[str, str, int], None]:
    return _on_docker_replica(client, lambda container: container.pause())


def _kube_running_pods(app_id: str, role: str, replica_id: int) -> list[Any]:
    from kubernetes import client, config

    from torchx_ext.schedulers.kubernetes.names import LABEL_ROLE, label_value

    config.load_kube_config()
    # "namespace:name", or "namespace:backend:name" for JobSet and Volcano.
    namespace, name = app_id.split(":")[0], app_id.split(":")[-1]
    found = []
    for pod in client.CoreV1Api().list_namespaced_pod(namespace, label_selector=f"torchx-ext/app-id={name}").items:
        labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
        index = labels.get("batch.kubernetes.io/job-completion-index", annotations.get("volcano.sh/task-index"))
        if (index == str(replica_id) and labels.get(LABEL_ROLE) == label_value(role)
                and pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"):
            found.append(pod)
    return found


def _kube_delete_pod(app_id: str, role: str, replica_id: int) -> None:
    from kubernetes import client

    for pod in _kube_running_pods(app_id, role, replica_id):
        client.CoreV1Api().delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)


def _stop_processes_of(container: Any) -> None:
    """SIGSTOP every process of a container, as a hung replica looks: the engine (a HEALTHCHECK)
    or the kubelet (a livenessProbe) still runs its probes in it."""
    top = container.top()
    column = top["Titles"].index("PID")
    for process in top["Processes"]:
        os.kill(int(process[column]), signal.SIGSTOP)


def _docker_freeze(client: Any) -> Callable[[str, str, int], None]:
    return _on_docker_replica(client, _stop_processes_of)


def _cut_link_of(container: Any) -> None:
    cut_link_of(int(container.attrs["State"]["Pid"]))


def _docker_cut(client: Any) -> Callable[[str, str, int], None]:
    return _on_docker_replica(client, _cut_link_of)


def _on_kube_replica(docker_client: Any, act: Callable[[Any], None]) -> Callable[[str, str, int], None]:
    """(app_id, role, replica_id) -> ``act`` on the container of that replica's running pod."""
    from tests.kubernetes.apiserver.containers import POD_LABEL

    def on_replica(app_id: str, role: str, replica_id: int) -> None:
        for pod in _kube_running_pods(app_id, role, replica_id):
            label = f"{POD_LABEL}={pod.metadata.namespace}/{pod.metadata.name}"
            for container in docker_client.containers.list(filters={"label": label}):
                act(container)

    return on_replica


def _kube_freeze(docker_client: Any) -> Callable[[str, str, int], None]:
    return _on_kube_replica(docker_client, _stop_processes_of)


def _kube_cut(docker_client: Any) -> Callable[[str, str, int], None]:
    return _on_kube_replica(docker_client, _cut_link_of)


def _slurm_replica_processes(job_id: str, role: str, replica_id: int) -> list[int]:
    # The launcher on that node and its workers: everything below the task's step program,
    # which stays (as slurmstepd stays when a task dies) to record how the replica ended. The
    # batch script and srun carry SLURM_PROCID=0 too: they are not the replica.
    steps = []
    forked: set[int] = set()
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
                command = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
                parents[int(entry.name)] = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            # A job in an allocation (its app id holds a '-') carries its app id as the driver gave it.
            marker = f"TORCHX_EXT_SLURM_APP_ID={job_id}" if "-" in job_id else f"SLURM_JOB_ID={job_id}"
            if (marker.encode() in environ and f"SLURM_PROCID={replica_id}".encode() in environ
                    and b"torchx_ext.schedulers.slurm.step" in command and role.encode() in command):
                steps.append(int(entry.name))
            elif marker.encode() in environ and f"{REPLICA_ENV}={role}/{replica_id}".encode() in environ:
                forked.add(int(entry.name))  # a warm start's launcher and workers: no child of the step program
    below: set[int] = set()
    frontier = set(steps)
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - below
        below |= frontier
    return sorted(below | forked)


def _slurm_kill(job_id: str, role: str, replica_id: int) -> None:
    _sigkill(_slurm_replica_processes(job_id, role, replica_id))


def _slurm_freeze(job_id: str, role: str, replica_id: int) -> None:
    for pid in _slurm_replica_processes(job_id, role, replica_id):
        os.kill(pid, signal.SIGSTOP)


def _local_leftovers(app_id: str, settle_s: float = 3.0) -> list[str]:
    # The supervisor records the end as its last act: give it a moment to exit after that.
    return still_there(lambda: _local_processes(app_id), settle_s, poll_s=0.05)


def _local_processes(app_id: str) -> list[str]:
    found = {pid for pid in marked_processes(app_id)}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                command = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            except OSError:
                continue
            if app_id.encode() in command:
                found.add(int(entry.name))
    return [f"pid {pid}: {Path(f'/proc/{pid}/cmdline').read_bytes()!r}" for pid in sorted(found) if alive(pid)]



def _docker_leftovers(client: Any) -> Callable[..., list[str]]:
    def leftovers(app_id: str, settle_s: float = 5.0) -> list[str]:
        # Containers of the job still running, and host processes naming it (its watcher; the
        # containers' processes too, which the host sees and whose launcher names the job).
        def found() -> list[str]:
            running = client.containers.list(filters={"label": f"torchx_ext.app_id={app_id}"}, ignore_removed=True)
            return [f"container {container.name}: {container.status}" for container in running] + _local_processes(app_id)

        return still_there(found, settle_s)

    return leftovers


def kube_leftovers(client: Any) -> Callable[..., list[str]]:
    def leftovers(app_id: str, settle_s: float = 15.0) -> list[str]:  # the kubelet's grace period is 5 s
        # The pods' containers still running on the test engine (the kubelet stand-in names each
        # by its pod, {namespace}/{job}-{index}-{suffix}, and the job by the app id).
        name = app_id.rpartition(":")[2]

        def found() -> list[str]:
            # ignore_removed: a pod's container may go between the listing and its inspection.
            running = client.containers.list(filters={"label": "torchx-ext-test.kube/cluster"}, ignore_removed=True)
            return [f"container of pod {pod}: {container.status}" for container in running
                    if (pod := container.labels.get("torchx-ext-test.kube/pod", "")).split("/", 1)[-1].startswith(name)]

        return still_there(found, settle_s, poll_s=0.2)

    return leftovers


@pytest.fixture(params=EVERY_CASE)
def scheduler(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SchedulerUnderTest]:
    if request.param.startswith("local_cwd"):
        monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
        cfg: dict[str, Any] = {"log_dir": str(tmp_path / "logs"), "cancel_grace": 5}
        if request.param == "local_cwd-warm":  # the job's processes forked by the warm interpreter
            ensure_warm()
            cfg["warm"] = True
        yield SchedulerUnderTest("local_cwd", cfg, _local_leftovers,
                                 kill_replica=_local_kill, freeze_replica=_local_freeze, store_outside_replicas=True)
    elif request.param == "local_docker":
        client = request.getfixturevalue("docker_client")
        image = request.getfixturevalue("test_image")
        # ignore_removed: the previous test's pods (kubernetes cases) may still be going.
        before = {container.id for container in client.containers.list(all=True, ignore_removed=True)}
        yield SchedulerUnderTest(
            "local_docker", {"cancel_grace": 5}, _docker_leftovers(client),
            component_args={"image": image.name, "mounts": list(image.mount_options)},
            kill_replica=_docker_kill(client), freeze_replica=_docker_freeze(client), shared_dir_mounts=_bind,
        )
        # Jobs keep their stopped containers until deleted: delete what this test made.
        from torchx.schedulers import get_scheduler_factories

        docker_scheduler = get_scheduler_factories()["local_docker"]("conformance")
        made = {container.labels.get("torchx_ext.app_id")
                for container in client.containers.list(all=True, ignore_removed=True) if container.id not in before}
        for app_id in made - {None}:
            docker_scheduler.delete(app_id)
        docker_scheduler.close()
    elif request.param.startswith("kubernetes"):
        backend = request.param.partition("-")[2] or "job"
        client = request.getfixturevalue("docker_client")
        request.getfixturevalue("kube_cluster")  # KUBECONFIG points at it
        image = request.getfixturevalue("test_image")  # the node mounts what its containers need
        from torchx.schedulers import get_scheduler_factories

        kube_scheduler = get_scheduler_factories()["kubernetes"]("conformance")
        before = {item.app_id for item in kube_scheduler.list()}
        # One CPU per replica: the fake's node is this 2-CPU machine, and pods request what they
        # ask for (two replicas asking for 2 CPUs each would not both fit, as on a real node).
        yield SchedulerUnderTest("kubernetes", {"cancel_grace": 5, "backend": backend}, kube_leftovers(client),
                                 component_args={"image": image.name, "cpu": 1},
                                 kill_replica=_kube_delete_pod, freeze_replica=_kube_freeze(client),
                                 shared_dir_mounts=_bind, keeps_lost_replicas_end=False)
        # Jobs stay until deleted: delete what this test made (their pods go with them).
        for app_id in {item.app_id for item in kube_scheduler.list()} - before:
            kube_scheduler.delete(app_id)
        kube_scheduler.close()
    elif request.param.startswith("slurm"):
        request.getfixturevalue("slurm_cluster")  # SLURM_CONF points at it
        monkeypatch.setenv(SLURM_STATE_ROOT_ENV, str(tmp_path / "slurm-state"))
        from torchx.schedulers import get_scheduler_factories

        slurm_scheduler = get_scheduler_factories()["slurm"]("conformance")
        # A test that needs every node (an elastic job allocated MIN-MAX) must not start while
        # the last test's job still holds one.
        assert still_there(busy_nodes, settle_s=30, poll_s=0.2) == []
        cfg = {"job_dir": str(tmp_path / "jobs")}
        if request.param.startswith("slurm-allocation"):  # the job's steps in an allocation held for the test
            cfg["allocation"] = hold_allocation(2)
        if request.param == "slurm-allocation-warm":  # and its launchers forked by the nodes' warm interpreters
            warm_up(cfg["allocation"], 2, tmp_path / "jobs")
            cfg["warm"] = True
        # One CPU per replica: both test nodes are this 2-CPU machine.
        yield SchedulerUnderTest("slurm", cfg, slurm_leftovers,
                                 component_args={"cpu": 1}, kill_replica=_slurm_kill, freeze_replica=_slurm_freeze)
        # Every replica our launcher ran was forked (other programs start anew, unsaid).
        cold = [log.name for log in (tmp_path / "jobs").glob("*/*.log")
                if "[torchx_ext.launcher]" in (text := log.read_text(errors="replace"))
                and "is a fork of this node's warm interpreter" not in text]
        for item in slurm_scheduler.list():
            slurm_scheduler.delete(item.app_id)
        if "allocation" in cfg:
            subprocess.run(["scancel", cfg["allocation"]], capture_output=True)
        assert not (cfg.get("warm") and cold), f"launchers of the warm case started anew: {cold}"
    else:
        raise AssertionError(request.param)



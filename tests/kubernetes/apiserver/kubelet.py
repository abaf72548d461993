"""The kubelet stand-in: schedules pods onto the one node, admits them (exclusive CPUs), pulls each
container's image through the engine as its imagePullPolicy says (from the test registry, or
failing as a real pull fails), runs it as a Docker container, reports their states, and carries out
graceful pod deletion.

One loop, woken by store changes and otherwise every 100 ms, lists this cluster's containers with a
single Docker call; the slow parts (starting and stopping containers) run on a thread pool so that
one pod's 30 s grace period does not stall the others."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tests.kubernetes.apiserver import errors
from tests.kubernetes.apiserver.conditions import condition, set_condition
from tests.kubernetes.apiserver.control_loop import ControlLoop
from tests.kubernetes.apiserver.containers import (argv, CLUSTER_LABEL, POD_LABEL, UID_LABEL, aliases, environment, host_config_args,
                                                    labels, network_name)
from tests.kubernetes.apiserver.logs import stream_logs
from tests.kubernetes.apiserver.node import NODE_NAME, Node, TopologyError, exclusive_cpu_count
from tests.kubernetes.apiserver.resources import PODS, SERVICES, Obj
from tests.kubernetes.apiserver.selectors import parse_selector
from tests.kubernetes.apiserver.store import Store, now_rfc3339

log = logging.getLogger(__name__)
TERMINAL = ("Succeeded", "Failed")
MESSAGE_LIMIT, FALLBACK_LINES, FALLBACK_LIMIT = 4096, 80, 2048
PULL_BACKOFF_S, PULL_BACKOFF_MAX_S = 0.5, 10.0


def default_pull_policy(image: str) -> str:
    """A kubelet's ``imagePullPolicy`` when the pod names none."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    return "Always" if ":" not in last or last.endswith(":latest") else "IfNotPresent"


@dataclass
class Runtime:
    """What the kubelet knows of a pod it admitted."""
    directory: Path
    container_ids: dict[str, str] = field(default_factory=dict)
    message_files: dict[str, Path] = field(default_factory=dict)
    started: bool = False
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)  # container -> state.terminated
    restarts: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0  # monotonic, for the liveness probes' initial delay
    probe_due: dict[str, float] = field(default_factory=dict)  # container -> next liveness probe
    probe_failures: dict[str, int] = field(default_factory=dict)  # container -> failures in a row
    ready_due: dict[str, float] = field(default_factory=dict)  # container -> next readiness probe
    ready_runs: dict[str, tuple[bool, int]] = field(default_factory=dict)  # container -> (last result, its run)


def _docker_time(text: str) -> str:
    """Docker's nanosecond timestamps as the API's second-precision RFC 3339."""
    return text[:19] + "Z" if text and not text.startswith("0001") else now_rfc3339()


def _set_ready_conditions(status: dict[str, Any]) -> None:
    ready = all(entry.get("ready") for entry in status.get("containerStatuses") or [])
    for kind in ("Ready", "ContainersReady"):
        set_condition(status, condition(kind, ready, None if ready else "ContainersNotReady"))


def _ours_to_schedule(pod: Obj) -> bool:
    # Pods of scheduler "volcano" wait for the Volcano stand-in's gang decision (crd_controllers).
    if pod["spec"].get("schedulerName", "default-scheduler") == "default-scheduler":
        return True
    return (pod["metadata"].get("annotations") or {}).get("torchx-ext-test.kube/gang-bound") == "true"


class Kubelet(ControlLoop):
    def __init__(self, store: Store, docker_client: Any, node: Node, cluster_id: str, work_dir: Path,
                 node_mounts: tuple[str, ...] = ()) -> None:
        super().__init__(store, "fake-kubelet-loop", (self._sync,))
        self._docker, self._api = docker_client, docker_client.api
        self.node, self._id, self._work_dir, self._node_mounts = node, cluster_id, work_dir, node_mounts
        self._runtimes: dict[str, Runtime] = {}
        self._busy: set[str] = set()  # pod uids with a start or stop in flight on the pool
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="fake-kubelet")
        self._holds: list[Callable[[Mapping[str, str]], bool]] = []
        self._pull_attempts: dict[str, int] = {}
        self._pull_after: dict[str, float] = {}  # pod uid -> monotonic time of its next pull
        self.pull_delay_s = 0.0
        """How long each pod start takes to pull its image from now on (a multi-GB image on a node
        that has not cached it), on top of the engine's own pull."""
        self.pulls: list[str] = []
        """Every image pulled, in order: what a test reads to tell a pull from a cached image."""
        self._networks: dict[str, str] = {}
        # Liveness probes run apart from the pods' starts and stops: a probe may take its timeout.
        self._probes = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fake-kubelet-probe")
        self._probing: set[tuple[str, str]] = set()

    # -- lifecycle ----------------------------------------------------------------------------------

    def stop(self) -> None:
        super().stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._probes.shutdown(wait=True, cancel_futures=True)
        for container in self._api.containers(all=True, filters={"label": f"{CLUSTER_LABEL}={self._id}"}):
            self._remove_container(container["Id"])
        for network in self._api.networks(filters={"label": f"{CLUSTER_LABEL}={self._id}"}):
            try:
                self._api.remove_network(network["Id"])
            except Exception as error:  # an engine error must not hide the others' cleanup
                log.warning("could not remove network %s: %s", network.get("Name"), error)
        shutil.rmtree(self._work_dir, ignore_errors=True)

    def hold(self, selector: str) -> None:
        self._holds.append(parse_selector(selector))

    def release(self) -> None:
        self._holds.clear()

    def held(self, pod: Obj) -> bool:
        """Whether a test holds the pod off the node (``hold``)."""
        labels_ = pod["metadata"].get("labels") or {}
        return any(hold(labels_) for hold in self._holds)

    def _submit(self, uid: str, work: Callable[[], None]) -> None:
        with self._lock:
            if uid in self._busy:
                return
            self._busy.add(uid)

        def run() -> None:
            try:
                work()
            except Exception:
                log.exception("fake kubelet pod work failed")
            finally:
                with self._lock:
                    self._busy.discard(uid)
        self._pool.submit(run)

    # -- the loop -----------------------------------------------------------------------------------

    def _sync(self) -> None:
        pods, _ = self._store.list(PODS)
        listing = self._api.containers(all=True, filters={"label": f"{CLUSTER_LABEL}={self._id}"})
        states = {c["Id"]: c["State"] for c in listing}
        on_node = [p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") not in TERMINAL]
        live = {p["metadata"]["uid"] for p in pods}
        for pod in pods:
            uid = pod["metadata"]["uid"]
            with self._lock:
                if uid in self._busy:
                    continue
            if pod["metadata"].get("deletionTimestamp"):
                self._submit(uid, partial(self._delete, pod))
            elif not pod["spec"].get("nodeName"):
                if not _ours_to_schedule(pod):
                    continue
                if self._schedule(pod, on_node):
                    on_node.append(pod)
            elif pod["status"].get("phase") not in TERMINAL:
                runtime = self._runtimes.get(uid)
                if runtime is None:
                    self._admit(pod)
                elif runtime.started:
                    self._check_exits(pod, runtime, states)
                    self._probe_liveness(pod, runtime, states)
                    self._probe_readiness(pod, runtime, states)
        # Pods removed without going through a graceful deletion (or containers of earlier runs).
        for uid in [uid for uid in list(self._runtimes) if uid not in live]:  # the pool pops from it
            self._submit(uid, partial(self._cleanup, uid))
        for container in listing:
            uid = container["Labels"].get(UID_LABEL, "")
            if uid not in live and uid not in self._runtimes:
                self._submit(uid, partial(self._remove_container, container["Id"]))
        # A namespace's network goes with its last pod: an engine has room for some 30 bridge
        # networks, and a test session makes a namespace per test.
        namespaces = {p["metadata"].get("namespace") for p in pods}
        for namespace in list(self._networks):
            if namespace not in namespaces and not any(
                    c["Labels"].get(POD_LABEL, "").startswith(f"{namespace}/") for c in listing):
                self._remove_network(namespace)

    def _write_status(self, pod: Obj, change: Callable[[dict[str, Any]], None]) -> None:
        meta = pod["metadata"]

        def apply(current: Obj) -> None:
            if current["metadata"]["uid"] == meta["uid"]:
                change(current.setdefault("status", {}))
        try:
            self._store.update(PODS, meta["namespace"], meta["name"], apply)
        except errors.ApiError:
            pass  # deleted meanwhile

    def _schedule(self, pod: Obj, on_node: list[Obj]) -> bool:
        labels_ = pod["metadata"].get("labels") or {}
        if any(hold(labels_) for hold in self._holds):
            reason: str | None = "0/1 nodes are available: 1 node(s) were held by the test (TestCluster.hold_pods)."
        else:
            reason = self.node.unschedulable_reason(pod, on_node)
        if reason is not None:
            self._write_status(pod, lambda status: set_condition(
                status, condition("PodScheduled", False, "Unschedulable", reason)))
            return False

        def bind(current: Obj) -> None:
            if current["metadata"]["uid"] == pod["metadata"]["uid"]:
                current["spec"]["nodeName"] = NODE_NAME
                set_condition(current.setdefault("status", {}), condition("PodScheduled", True))
        try:
            self._store.update(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], bind)
        except errors.ApiError:
            return False
        return True

    def _image_error(self, container: Obj) -> str | None:
        """Pulls the container's image through the engine as its ``imagePullPolicy`` says (a
        kubelet's default: Always for ``:latest`` or no tag, else IfNotPresent); what went wrong,
        or None when the image is there."""
        image = container["image"]
        policy = container.get("imagePullPolicy") or default_pull_policy(image)
        if policy != "Always" and self._image_present(image):
            return None
        if policy == "Never":
            return f'Container image "{image}" is not present with pull policy of Never'
        try:
            self._api.pull(image)
        except Exception as error:  # the engine's APIError, or its connection's
            reason = " ".join(str(getattr(error, "explanation", None) or error).split())
            return f'failed to pull and unpack image "{image}": {reason}'
        self.pulls.append(image)
        return None

    def _image_present(self, image: str) -> bool:
        try:
            self._api.inspect_image(image)
        except Exception:
            return False
        return True

    def _admit(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        count = exclusive_cpu_count(pod)
        if count:
            try:
                self.node.allocate(uid, count)
            except TopologyError as error:
                reason = "TopologyAffinityError" if "Topology" in str(error) else "UnexpectedAdmissionError"
                self._write_status(pod, lambda status: status.update(
                    phase="Failed", reason=reason, message=str(error), startTime=now_rfc3339()))
                return
        if time.monotonic() < self._pull_after.get(uid, 0.0):
            return  # backing off after a failed pull
        self._submit(uid, lambda: self._pull_and_start(pod))

    def _pull_and_start(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        failed = {c["name"]: (c["image"], error) for c in pod["spec"]["containers"]
                  if (error := self._image_error(c)) is not None}
        if failed:
            attempts = self._pull_attempts[uid] = self._pull_attempts.get(uid, 0) + 1
            self._pull_after[uid] = time.monotonic() + min(PULL_BACKOFF_MAX_S, PULL_BACKOFF_S * 2 ** (attempts - 1))
            self._write_status(pod, lambda status: self._pulling(status, pod, failed, attempts))
            return
        if self.pull_delay_s > 0:
            time.sleep(self.pull_delay_s)
        runtime = self._runtimes[uid] = Runtime(self._work_dir / uid)
        self._start(pod, runtime)

    @staticmethod
    def _pulling(status: dict[str, Any], pod: Obj, failed: dict[str, tuple[str, str]], attempts: int) -> None:
        statuses = []
        for container in pod["spec"]["containers"]:
            if container["name"] in failed:
                image, error = failed[container["name"]]
                never = "pull policy of Never" in error
                waiting = ({"reason": "ErrImageNeverPull", "message": error} if never else
                           {"reason": "ErrImagePull", "message": error} if attempts == 1 else
                           {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'})
            else:
                waiting = {"reason": "ContainerCreating"}
            statuses.append({"name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                             "started": False, "restartCount": 0, "state": {"waiting": waiting}})
        status.update(phase="Pending", containerStatuses=statuses, hostIP="127.0.0.1")
        status.setdefault("startTime", now_rfc3339())
        set_condition(status, condition("Ready", False, "ContainersNotReady",
                                        f"containers with unready status: [{' '.join(failed)}]"))

    # -- starting -----------------------------------------------------------------------------------

    def _network(self, namespace: str) -> str:
        name = network_name(namespace)
        with self._lock:
            if namespace not in self._networks:
                existing = self._api.networks(names=[name])
                if existing:
                    self._networks[namespace] = existing[0]["Id"]
                else:
                    self._networks[namespace] = self._api.create_network(
                        name, driver="bridge", labels={CLUSTER_LABEL: self._id})["Id"]
            return name

    def _remove_network(self, namespace: str) -> None:
        with self._lock:
            network = self._networks.pop(namespace, None)
        if network is None:
            return
        try:
            self._api.remove_network(network)
        except Exception as error:  # a container still attached: tried again by a later pass
            log.debug("network of %s kept: %s", namespace, error)
            with self._lock:
                self._networks.setdefault(namespace, network)

    def _start(self, pod: Obj, runtime: Runtime) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid, namespace = meta["uid"], meta["namespace"]
        cpus = self.node.cpus_of(uid)
        try:
            network = self._network(namespace)
            services = {s["metadata"]["name"]: s for s in self._store.list(SERVICES, namespace)[0]}
            first: str | None = None
            for container in spec["containers"]:
                args, message_file = host_config_args(pod, container, runtime.directory, cpus,
                                                      self.node.numa_of(cpus), self._node_mounts)
                create: dict[str, Any] = {}
                if first is None:
                    args["network_mode"] = network
                    create["networking_config"] = self._api.create_networking_config(
                        {network: self._api.create_endpoint_config(aliases=aliases(pod, services))})
                    create["hostname"] = spec.get("hostname") or meta["name"]
                else:
                    args["network_mode"] = f"container:{first}"  # one network namespace per pod
                env = environment(pod, container)
                entrypoint, command = argv(container, env)
                created = self._api.create_container(
                    container["image"], command=command, entrypoint=entrypoint,
                    environment=env, working_dir=container.get("workingDir"),
                    labels=labels(pod, container, self._id), host_config=self._api.create_host_config(**args),
                    name=f"k8s_{container['name']}_{meta['name']}_{namespace}_{uid[:8]}", **create)
                runtime.container_ids[container["name"]] = created["Id"]
                runtime.message_files[container["name"]] = message_file
                first = first or created["Id"]
            for container_id in runtime.container_ids.values():
                self._api.start(container_id)
            assert first is not None
            address = self._api.inspect_container(first)["NetworkSettings"]["Networks"][network]["IPAddress"]
        except Exception as error:  # the engine refused: as a kubelet's StartError
            self._start_failed(pod, runtime, str(error))
            return
        started = now_rfc3339()

        def running(status: dict[str, Any]) -> None:
            status.update(phase="Running", hostIP="127.0.0.1", podIP=address, podIPs=[{"ip": address}])
            status.setdefault("startTime", started)
            # A container with a readinessProbe is not ready until the probe passes.
            status["containerStatuses"] = [
                {"name": c["name"], "image": c["image"], "imageID": f"docker-pullable://{c['image']}",
                 "containerID": f"docker://{runtime.container_ids[c['name']]}", "ready": "readinessProbe" not in c,
                 "started": True, "restartCount": 0, "state": {"running": {"startedAt": started}}}
                for c in spec["containers"]]
            for kind in ("PodReadyToStartContainers", "Initialized"):
                set_condition(status, condition(kind, True))
            _set_ready_conditions(status)
        self._write_status(pod, running)
        runtime.started_at = time.monotonic()
        runtime.started = True

    def _start_failed(self, pod: Obj, runtime: Runtime, message: str) -> None:
        finished = now_rfc3339()
        for container in pod["spec"]["containers"]:
            runtime.finished[container["name"]] = {"exitCode": 128, "reason": "StartError", "message": message[:4096],
                                                   "startedAt": finished, "finishedAt": finished}
        runtime.started = True
        self._write_status(pod, lambda status: self._terminal(status, pod, runtime))

    # -- running ------------------------------------------------------------------------------------

    def _check_exits(self, pod: Obj, runtime: Runtime, states: dict[str, str]) -> None:
        changed = False
        policy = pod["spec"].get("restartPolicy", "Always")
        for name, container_id in runtime.container_ids.items():
            # A container missing from the listing was created after it: not an exit.
            if name in runtime.finished or states.get(container_id) not in ("exited", "dead"):
                continue
            terminated = self._terminated_state(pod, name, container_id, runtime)
            if policy == "Always" or (policy == "OnFailure" and terminated["exitCode"] != 0):
                runtime.restarts[name] = runtime.restarts.get(name, 0) + 1
                self._api.start(container_id)  # logs of every run stay in one container, as --previous would
                self._write_status(pod, partial(self._restarted, name=name, terminated=terminated,
                                                count=runtime.restarts[name]))
                continue
            runtime.finished[name] = terminated
            changed = True
        if not changed:
            return
        if len(runtime.finished) == len(runtime.container_ids):
            self.node.release(pod["metadata"]["uid"])
            self._write_status(pod, lambda status: self._terminal(status, pod, runtime))
        else:
            self._write_status(pod, lambda status: self._update_finished(status, runtime))

    def _probe_liveness(self, pod: Obj, runtime: Runtime, states: dict[str, str]) -> None:
        """Run each container's exec livenessProbe as the kubelet does: after initialDelaySeconds,
        every periodSeconds, a run longer than timeoutSeconds failing; failureThreshold failures in
        a row kill the container (SIGTERM, SIGKILL after the pod's grace period), which then
        restarts or ends as its pod's restartPolicy says."""
        for name, container_id, probe in self._due_probes(pod, runtime, states, "livenessProbe", runtime.probe_due,
                                                          ("running", "paused")):
            self._probes.submit(self._run_probe, pod, runtime, name, container_id, probe)

    def _due_probes(self, pod: Obj, runtime: Runtime, states: dict[str, str], field: str, due_at: dict[str, float],
                    live: tuple[str, ...]) -> list[tuple[str, str, dict[str, Any]]]:
        """(container, its id, probe) of each exec probe of kind ``field`` due now, marked as running."""
        now, uid = time.monotonic(), pod["metadata"]["uid"]
        found = []
        for container in pod["spec"]["containers"]:
            name, probe = container["name"], container.get(field)
            container_id = runtime.container_ids.get(name)
            if (not probe or "exec" not in probe or container_id is None or name in runtime.finished
                    or states.get(container_id) not in live or (uid, f"{field}:{name}") in self._probing):
                continue
            due = due_at.get(name, runtime.started_at + int(probe.get("initialDelaySeconds", 0)))
            if now < due:
                continue
            due_at[name] = now + int(probe.get("periodSeconds", 10))
            with self._lock:
                self._probing.add((uid, f"{field}:{name}"))
            found.append((name, container_id, probe))
        return found

    def _run_probe(self, pod: Obj, runtime: Runtime, name: str, container_id: str, probe: dict[str, Any]) -> None:
        try:
            passed, output = self._exec_probe(container_id, probe)
            if passed:
                runtime.probe_failures[name] = 0
                return
            failures = runtime.probe_failures[name] = runtime.probe_failures.get(name, 0) + 1
            log.info("liveness probe of %s/%s failed (%d): %s", pod["metadata"]["name"], name, failures, output)
            if failures < int(probe.get("failureThreshold", 3)):
                return
            runtime.probe_failures[name] = 0
            grace = int(probe.get("terminationGracePeriodSeconds", pod["spec"].get("terminationGracePeriodSeconds", 30)))
            try:
                self._api.stop(container_id, timeout=grace)  # a paused container is thawed and stopped
            except Exception as error:
                log.debug("stopping %s after its liveness probe: %s", container_id, error)
        except Exception:
            log.exception("fake kubelet liveness probe failed to run")
        finally:
            with self._lock:
                self._probing.discard((pod["metadata"]["uid"], f"livenessProbe:{name}"))

    def _probe_readiness(self, pod: Obj, runtime: Runtime, states: dict[str, str]) -> None:
        """Run each container's exec readinessProbe every periodSeconds (after initialDelaySeconds):
        its result is the container's ``ready``, and the pod is Ready when all of them are."""
        for name, container_id, probe in self._due_probes(pod, runtime, states, "readinessProbe", runtime.ready_due,
                                                          ("running",)):
            self._probes.submit(self._run_readiness_probe, pod, runtime, name, container_id, probe)

    def _run_readiness_probe(self, pod: Obj, runtime: Runtime, name: str, container_id: str,
                             probe: dict[str, Any]) -> None:
        try:
            passed, _ = self._exec_probe(container_id, probe)
            last, run = runtime.ready_runs.get(name, (passed, 0))
            run = run + 1 if last == passed else 1
            runtime.ready_runs[name] = (passed, run)
            # As the kubelet: the result changes ready only after successThreshold passes, or
            # failureThreshold failures, in a row (a probe that times out is a failure).
            if run < int(probe.get("successThreshold" if passed else "failureThreshold", 1 if passed else 3)):
                return

            def set_ready(status: dict[str, Any]) -> None:
                for entry in status.get("containerStatuses") or []:
                    if entry["name"] == name and "running" in (entry.get("state") or {}):
                        entry["ready"] = passed
                _set_ready_conditions(status)
            self._write_status(pod, set_ready)
        except Exception:
            log.exception("fake kubelet readiness probe failed to run")
        finally:
            with self._lock:
                self._probing.discard((pod["metadata"]["uid"], f"readinessProbe:{name}"))

    def _exec_probe(self, container_id: str, probe: dict[str, Any]) -> tuple[bool, str]:
        timeout = int(probe.get("timeoutSeconds", 1))
        try:
            exec_id = self._api.exec_create(container_id, probe["exec"]["command"])["Id"]
        except Exception as error:  # a paused or stopped container runs no probe: a failure
            return False, str(error)
        output: list[bytes] = []
        runner = threading.Thread(target=lambda: output.append(self._api.exec_start(exec_id)), daemon=True)
        runner.start()
        runner.join(timeout)
        if runner.is_alive():
            return False, f"command timed out after {timeout}s"
        code = self._api.exec_inspect(exec_id).get("ExitCode")
        return code == 0, b"".join(output).decode(errors="replace").strip()

    def _terminated_state(self, pod: Obj, name: str, container_id: str, runtime: Runtime) -> dict[str, Any]:
        try:
            state = self._api.inspect_container(container_id)["State"]
        except Exception:
            now = now_rfc3339()
            return {"exitCode": 137, "reason": "Error", "message": "container vanished", "startedAt": now,
                    "finishedAt": now}
        code = int(state.get("ExitCode", 0))
        reason = "OOMKilled" if state.get("OOMKilled") else "Completed" if code == 0 else "Error"
        terminated: dict[str, Any] = {"exitCode": code, "reason": reason, "startedAt": _docker_time(state["StartedAt"]),
                                      "finishedAt": _docker_time(state["FinishedAt"]),
                                      "containerID": f"docker://{container_id}"}
        message_file = runtime.message_files.get(name)
        message = message_file.read_bytes()[:MESSAGE_LIMIT] if message_file and message_file.exists() else b""
        spec = next(c for c in pod["spec"]["containers"] if c["name"] == name)
        if not message and code != 0 and spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = self._api.logs(container_id, stdout=True, stderr=True, tail=FALLBACK_LINES)[-FALLBACK_LIMIT:]
        if message:
            terminated["message"] = message.decode(errors="replace")
        return terminated

    @staticmethod
    def _restarted(status: dict[str, Any], name: str, terminated: dict[str, Any], count: int) -> None:
        for entry in status.get("containerStatuses") or []:
            if entry["name"] == name:
                entry.update(restartCount=count, lastState={"terminated": terminated},
                             state={"running": {"startedAt": now_rfc3339()}})

    @staticmethod
    def _update_finished(status: dict[str, Any], runtime: Runtime) -> None:
        for entry in status.get("containerStatuses") or []:
            if entry["name"] in runtime.finished:
                entry.update(ready=False, started=False, state={"terminated": runtime.finished[entry["name"]]})
        set_condition(status, condition("Ready", False, "ContainersNotReady"))
        set_condition(status, condition("ContainersReady", False, "ContainersNotReady"))

    def _terminal(self, status: dict[str, Any], pod: Obj, runtime: Runtime) -> None:
        self._update_finished(status, runtime)
        codes = [t["exitCode"] for t in runtime.finished.values()]
        status["phase"] = "Succeeded" if codes and all(code == 0 for code in codes) else "Failed"
        set_condition(status, condition("Ready", False, "PodCompleted"))
        set_condition(status, condition("ContainersReady", False, "PodCompleted"))
        set_condition(status, condition("PodReadyToStartContainers", False))

    # -- deleting -----------------------------------------------------------------------------------

    def _delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        uid, grace = meta["uid"], int(meta.get("deletionGracePeriodSeconds") or 0)
        runtime = self._runtimes.get(uid)
        if runtime is not None and pod["status"].get("phase") not in TERMINAL:
            for container_id in runtime.container_ids.values():
                try:
                    self._api.stop(container_id, timeout=grace)  # SIGTERM, SIGKILL after the grace period
                except Exception:
                    pass  # already gone
            for name, container_id in runtime.container_ids.items():
                runtime.finished.setdefault(name, self._terminated_state(pod, name, container_id, runtime))
            if runtime.container_ids:
                # The real kubelet reports the terminal phase before the object goes away.
                self._write_status(pod, lambda status: self._terminal(status, pod, runtime))
        current = self._store.find(PODS, meta["namespace"], meta["name"])
        if current is not None and current["metadata"]["uid"] == uid:
            self._store.remove(PODS, meta["namespace"], meta["name"])
        self._cleanup(uid)

    def _cleanup(self, uid: str) -> None:
        runtime = self._runtimes.pop(uid, None)
        self._pull_attempts.pop(uid, None)
        self._pull_after.pop(uid, None)
        self.node.release(uid)
        if runtime is not None:
            for container_id in runtime.container_ids.values():
                self._remove_container(container_id)
            shutil.rmtree(runtime.directory, ignore_errors=True)

    def _remove_container(self, container_id: str) -> None:
        try:
            self._api.remove_container(container_id, force=True)
        except Exception:
            pass  # removed already

    # -- logs ---------------------------------------------------------------------------------------

    def pod_logs(self, namespace: str, name: str, query: dict[str, str]) -> Iterator[bytes]:
        container_id = self._running_container(namespace, name, query.get("container"))
        return self._safe(stream_logs(self._api, container_id, query, follow_allowed=True))

    def pod_exec(self, namespace: str, name: str, container: str | None, command: list[str]) -> tuple[bytes, bytes, int]:
        """Run ``command`` in a running container of the pod, as the real kubelet's exec does:
        (stdout, stderr, exit code)."""
        container_id = self._running_container(namespace, name, container)
        exec_id = self._api.exec_create(container_id, command, stdout=True, stderr=True)["Id"]
        out, err = self._api.exec_start(exec_id, demux=True)
        return out or b"", err or b"", int(self._api.exec_inspect(exec_id)["ExitCode"] or 0)

    def _running_container(self, namespace: str, name: str, container: str | None) -> str:
        pod = self._store.get(PODS, namespace, name)
        names = [c["name"] for c in pod["spec"]["containers"]]
        if not container:
            if len(names) != 1:
                raise errors.bad_request(f"a container name must be specified for pod {name}, "
                                         f"choose one of: [{' '.join(names)}]")
            container = names[0]
        if container not in names:
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        runtime = self._runtimes.get(pod["metadata"]["uid"])
        container_id = runtime.container_ids.get(container) if runtime is not None and runtime.started else None
        if container_id is None:
            waiting = "ContainerCreating"
            for entry in pod["status"].get("containerStatuses") or []:
                if entry["name"] == container and "waiting" in (entry.get("state") or {}):
                    waiting = entry["state"]["waiting"].get("reason", waiting)
            raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        return str(container_id)

    @staticmethod
    def _safe(chunks: Iterator[bytes]) -> Iterator[bytes]:
        """A container removed mid-stream (pod deleted) ends the log, as the real stream ends."""
        try:
            yield from chunks
        except Exception as error:
            log.debug("log stream ended: %s", error)

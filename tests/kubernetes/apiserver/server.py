"""``TestCluster``: the store, the HTTP API, the Job controller, the JobSet/Volcano/Kueue stand-ins
and the kubelet, started together."""

from __future__ import annotations

import tempfile
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.kubernetes.apiserver.crd_controllers import CrdControllers
from tests.kubernetes.apiserver.http import ApiHttpServer
from tests.kubernetes.apiserver.job_controller import JobController
from tests.kubernetes.apiserver.kubelet import Kubelet
from tests.kubernetes.apiserver.node import Node
from tests.kubernetes.apiserver.resources import LOCAL_QUEUES, PODS, VOLCANO_QUEUES
from tests.kubernetes.apiserver.store import Store


class TestCluster:
    __test__ = False  # not a test class, whatever pytest guesses from its name

    def __init__(self, docker_client: Any, *, namespaces: Iterable[str] = ("default",),
                 node_mounts: Iterable[str] = (), work_dir: Path | None = None,
                 labels: dict[str, str] | None = None, allocatable: dict[str, Any] | None = None,
                 numa_nodes: list[list[int]] | None = None, topology_policy: str = "none") -> None:
        """``node_mounts``: host paths bind-mounted read-only into every container (the test image's
        ``paths``); ``work_dir``: where termination-log files and emptyDirs live (a temp dir by default)."""
        self.id = uuid.uuid4().hex[:12]
        self.store = Store(tuple(namespaces))
        self.store.create(VOLCANO_QUEUES, "", {"metadata": {"name": "default"}})  # as Volcano installs it
        self.forbidden_namespaces: set[str] = set()
        self.missing_apis: set[str] = set()
        """API groups whose CRDs are "not installed" (404 on their paths), e.g. jobset.x-k8s.io."""
        self.request_log: list[tuple[str, str]] = []
        self._failures: list[tuple[int, str]] = []
        self._failures_lock = threading.Lock()
        self.node = Node(labels, allocatable, numa_nodes, topology_policy)
        directory = Path(tempfile.mkdtemp(prefix="fake-kube-", dir=work_dir))
        self.kubelet = Kubelet(self.store, docker_client, self.node, self.id, directory, tuple(node_mounts))
        self.controller = JobController(self.store)
        self.crd_controllers = CrdControllers(self.store, self.kubelet.held)
        self._http: ApiHttpServer | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> "TestCluster":
        self._http = ApiHttpServer(self)
        self._http.start()
        self.controller.start()
        self.crd_controllers.start()
        self.kubelet.start()
        return self

    def stop(self) -> None:
        """Stop serving, then kill and remove every container and network the kubelet created."""
        if self._http is not None:
            self._http.stop()
        self.controller.stop()
        self.crd_controllers.stop()
        self.kubelet.stop()

    def __enter__(self) -> "TestCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._http is not None, "start() the cluster first"
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def write_kubeconfig(self, path: Path | str, namespace: str | None = None) -> Path:
        context: dict[str, Any] = {"cluster": "fake", "user": "test"}
        if namespace:
            context["namespace"] = namespace
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                  "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                  "contexts": [{"name": "fake", "context": context}],
                  "users": [{"name": "test", "user": {"token": "test-token"}}]}
        target = Path(path)
        target.write_text(yaml.safe_dump(config))
        return target

    # -- knobs for tests ----------------------------------------------------------------------------

    @property
    def numa_nodes(self) -> list[list[int]]:
        return self.node.numa_nodes

    @numa_nodes.setter
    def numa_nodes(self, value: list[list[int]]) -> None:
        self.node.numa_nodes = value

    @property
    def topology_policy(self) -> str:
        return self.node.topology_policy

    @topology_policy.setter
    def topology_policy(self, value: str) -> None:
        self.node.topology_policy = value

    @property
    def kueue_queues(self) -> dict[str, float]:
        """The quota behind each Kueue LocalQueue, by its name: CPUs admitted at once (0 when not given)."""
        return self.crd_controllers.kueue_queues

    def add_local_queue(self, namespace: str, name: str, cpus: float = 0) -> None:
        """A Kueue LocalQueue in ``namespace``, as a cluster admin makes one, admitting ``cpus`` CPUs at once."""
        self.store.create(LOCAL_QUEUES, namespace, {"metadata": {"name": name}, "spec": {"clusterQueue": name}})
        self.kueue_queues[name] = cpus

    @property
    def labels(self) -> dict[str, str]:
        return self.node.labels

    @property
    def allocatable(self) -> dict[str, Any]:
        return self.node.allocatable

    def fail_next(self, status: int, count: int = 1, path_contains: str = "") -> None:
        """The next ``count`` requests (whose path holds ``path_contains``) answer ``status`` with a
        Status body."""
        with self._failures_lock:
            self._failures.extend([(status, path_contains)] * count)

    def take_injected_failure(self, path: str) -> int | None:
        """The status a request to ``path`` is to answer instead, if one was asked for."""
        with self._failures_lock:
            for position, (status, part) in enumerate(self._failures):
                if part in path:
                    del self._failures[position]
                    return status
            return None

    def clear_injected_failures(self) -> None:
        with self._failures_lock:
            self._failures.clear()

    def hold_pods(self, label_selector: str) -> None:
        """Pods matching stay Pending and unscheduled until ``release_pods``."""
        self.kubelet.hold(label_selector)

    def release_pods(self) -> None:
        self.kubelet.release()

    def exclusive_cpus(self, namespace: str, name: str) -> list[int]:
        """The CPUs the static CPU manager gave the pod (empty when it has none)."""
        pod = self.store.get(PODS, namespace, name)
        return self.node.cpus_of(pod["metadata"]["uid"])

    def requests(self, method: str | None = None, path_contains: str = "") -> int:
        """How many requests the log holds with that method (any when None) and path substring."""
        return sum(1 for m, p in list(self.request_log) if (method is None or m == method) and path_contains in p)

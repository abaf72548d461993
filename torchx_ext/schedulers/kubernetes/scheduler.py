"""kubernetes: torchx's Scheduler over Indexed Jobs, a JobSet or a Volcano Job (``-cfg backend``,
see ``request.py``).

App ids are ``{namespace}:{name}`` (the ``job`` backend, as torchx's builtin writes them) or
``{namespace}:{backend}:{name}``. Every command reads the API (two or three requests for
``describe``, whatever the job's size), so any process can track any job. ``cancel`` records
the cancel on the app and stops its pods (``backends.py``: how, per backend); their logs go
with them unless the cluster ships logs elsewhere, and the app stays, CANCELLED, until
``delete`` removes it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, List, Optional

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx.specs import AppDef, AppDryRunInfo, Role, runopts
from torchx.workspace.api import WorkspaceMixin

from torchx_ext.error_file import ErrorReport
from torchx_ext.errors import InvalidArgumentError, KubernetesError
from torchx_ext.schedulers.common.app_ids import DNS_LABEL_IDS, new_app_id
from torchx_ext.schedulers.common.checks import seconds_option
from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.schedulers.common.scheduler import JobView, ReplicaKeys, ReplicaReport, SchedulerShell, describe_response
from torchx_ext.liveness import runs_our_launcher
from torchx_ext.stack_request import REQUEST_SIGNAL
from torchx_ext.schedulers.common.states import JobEnd, State, app_state
from torchx_ext.schedulers.common.watch import EndingWindow
from torchx_ext.schedulers.kubernetes.workloads import WORKLOAD_OF_BACKEND, Workload, app_selector
from torchx_ext.schedulers.kubernetes.client import Cluster, WatchLost, connect
from torchx_ext.schedulers.kubernetes.request import KubernetesJobRequest, build_request, check_role
from torchx_ext.schedulers.kubernetes.pod_security import check_pods_admitted
from torchx_ext.schedulers.kubernetes.queues import check_queue
from torchx_ext.schedulers.kubernetes.options import (
    DEFAULT_CANCEL_GRACE_S,
    DEFAULT_RESERVED_MEMMB,
    DEFAULT_RESERVED_MILLICPU,
    DEFAULT_PULL_TIMEOUT_S,
    IMAGE_HINT,
    KubernetesOpts,
    ManifestOptions,
    run_opts,
)
from torchx_ext.schedulers.kubernetes.view import KubernetesJobView, end_due
from torchx_ext.schedulers.kubernetes.workspace import PendingPush, add_workspace_opts, build_workspace_image, push_and_pin

SCHEDULER = "kubernetes"
_CANCEL_CHECK_S = 10
ENDING_CHECK_S = 0.2


class KubernetesScheduler(WorkspaceMixin[None], SchedulerShell[KubernetesOpts]):
    image_hint = IMAGE_HINT

    def __init__(self, session_name: str) -> None:
        super().__init__(SCHEDULER, session_name)
        self._pushes: dict[str, PendingPush] = {}
        """The workspace images built for this process's dry-runs, by the reference roles name."""
        self._cluster: Cluster | None = None
        self._pod_versions: dict[str, str] = {}
        """Per app: the version of the last pod change ``wait_for_change`` saw."""
        self._ending = EndingWindow()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(connect())
        return self._cluster

    def _run_opts(self) -> runopts:
        return run_opts()

    def workspace_opts(self) -> runopts:
        opts = runopts()
        add_workspace_opts(opts)
        return opts

    def build_workspace_and_update_role(self, role: Role, workspace: str, cfg: Mapping[str, Any]) -> None:
        """The role's image with the workspace on top (built only when its content changed), to be
        pushed to ``image_repo`` at submission (``workspace.py``). Options and the role are checked
        first: a bad value is refused before anything is built."""
        _options(cfg).check()
        check_role(role)
        push = build_workspace_image(role, workspace, cfg)
        self._pushes[push.reference] = push

    def _submit_dryrun(self, app: AppDef, cfg: KubernetesOpts) -> AppDryRunInfo:
        pushes = tuple(self._pushes[image] for image in dict.fromkeys(role.image for role in app.roles)
                       if image in self._pushes)
        manifests = build_request(app, app_id=new_app_id(app.name, DNS_LABEL_IDS), options=_options(cfg),
                                    pushes=pushes)
        return AppDryRunInfo(manifests, KubernetesJobRequest.to_yaml)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        manifests: KubernetesJobRequest = dryrun_info.request
        check_queue(self.cluster, manifests.backend, manifests.namespace, manifests.queue)
        check_pods_admitted(self.cluster, manifests.namespace, manifests.objects)
        # Pushed first: a push that fails leaves nothing on the cluster.
        pinned = dataclasses.replace(manifests, objects=push_and_pin(manifests.objects, manifests.pushes), pushes=())
        self.cluster.create_app(pinned, validate=manifests.validate)
        return _app_id(manifests.namespace, manifests.backend, manifests.app_id)

    def describe(self, app_id: str) -> Optional[DescribeAppResponse]:
        """The app as its objects and pods are now (two or three requests, whatever its size).
        Whoever looks ends an app that needs it (``view.end_due``): an image that has not
        pulled for ``image_pull_timeout`` seconds, a failed role whose app still runs other roles."""
        namespace, backend, name = self._split(app_id)
        view = backend.view(self.cluster, namespace, name)
        if view.state is None:
            return None
        end = end_due(view, time.time())
        if end is not None:
            backend.end(self.cluster, namespace, view, end)
            view = backend.view(self.cluster, namespace, name)
        return job_response(app_id, view)

    def wait_for_change(self, app_id: str, timeout_s: float) -> bool:
        """Until one of the app's pods changes (a watch, each change once). Once every pod has
        ended, only a moment (for up to ``ENDING_WINDOW_S``): the controllers then record the
        app's end on its own objects, which a pods' watch does not show."""
        namespace, _, name = self._split(app_id)
        selector = app_selector(name)
        pods, version = self.cluster.pods_and_version(namespace, selector)
        ended = bool(pods) and all((pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") for pod in pods)
        if self._ending.brief(app_id, ended):
            time.sleep(min(timeout_s, ENDING_CHECK_S))
            return True
        try:
            seen = self.cluster.next_pod_event(namespace, selector, self._pod_versions.get(app_id) or version,
                                               timeout_s)
        except WatchLost:
            self._pod_versions.pop(app_id, None)  # the next wait starts from a fresh list
            return True
        if seen is not None:
            self._pod_versions[app_id] = seen
        return seen is not None

    def list(self, cfg: Optional[Mapping[str, Any]] = None) -> List[ListAppResponse]:
        """The apps in the namespace (``cfg``'s on torchx-nightly, else the kubeconfig's), from
        one list per backend (a backend whose CRD the cluster lacks has none)."""
        namespace = (cfg or {}).get("namespace") or self.cluster.connection.namespace
        return [ListAppResponse(app_id=_app_id(namespace, backend.name, app), state=app_state(state))
                for backend in WORKLOAD_OF_BACKEND.values() for app, state in sorted(backend.apps(self.cluster, namespace),
                                                                          key=lambda item: item[0])]

    def ask_for_stacks(self, app_id: str, role_name: str | None = None,
                       replica_id: int | None = None) -> ReplicaKeys:
        namespace, backend, name = self._split(app_id)
        view = backend.view(self.cluster, namespace, name)
        if view.state is None:
            raise self.unknown_app(app_id)
        chosen = self.stack_targets(app_id, [(replica.role, replica.replica_id, replica.state is State.RUNNING
                                              and bool(replica.pod)) for replica in view.replicas], role_name, replica_id)
        failed = []
        for replica in view.replicas:
            if (replica.role, replica.replica_id) not in chosen:
                continue
            container = self.cluster.read_pod(replica.pod, namespace)["spec"]["containers"][0]
            command = [*(container.get("command") or []), *(container.get("args") or [])]
            if not command or not runs_our_launcher(command[0], command[1:]):
                failed.append(f"{replica.key}: it does not run torchx_ext's launcher")
                continue
            try:  # the container's own interpreter signals its PID 1, the launcher (pods have no init)
                self.cluster.exec_in_pod(replica.pod, namespace, [
                    command[0], "-c", f"import os; os.kill(1, {int(REQUEST_SIGNAL)})"])
            except KubernetesError as error:
                failed.append(f"{replica.key}: {error}")
        if failed:
            raise KubernetesError(f"could not ask for stacks: {'; '.join(failed)}")
        return chosen

    def _replica_lines(self, app_id: str, role_name: str, replica_id: int,
                       query: LogQuery) -> Iterable[tuple[float, str]]:
        from torchx_ext.schedulers.kubernetes.client import lines_of
        from torchx_ext.schedulers.kubernetes.logs import since_seconds, timed_lines

        namespace, backend, name = self._split(app_id)
        view = backend.view(self.cluster, namespace, name)
        if view.state is None:
            raise self.unknown_app(app_id)
        replica = next((found for found in view.replicas if (found.role, found.replica_id) == (role_name, replica_id)),
                       None)
        if replica is None:
            raise self.unknown_replica(app_id, role_name, replica_id, (found.key for found in view.replicas))
        if not replica.pod and replica.state is not State.PENDING:
            raise InvalidArgumentError(f"replica {replica.key} of {app_id} has no pod ({replica.state}): "
                                       "its pods were removed, and their logs with them")

        def lines() -> Iterator[tuple[float, str]]:
            # A pod that has not started has no log yet: nothing to show, or, when following,
            # its log from the moment it starts.
            pod = replica.pod
            while True:
                if pod:
                    try:
                        response = self.cluster.pod_log(pod, namespace, None, follow=query.should_tail,
                                                        since_seconds=since_seconds(query))
                        yield from timed_lines(lines_of(response), query.until)
                        return
                    except KubernetesError as error:
                        if error.status != 400 or "waiting to start" not in str(error):
                            raise
                if not query.should_tail:
                    return
                time.sleep(1)
                current = backend.view(self.cluster, namespace, name)
                found = next((item for item in current.replicas if item.key == replica.key), None)
                if current.state is None or found is None:
                    return
                pod = found.pod

        return lines()

    def _cancel_existing(self, app_id: str) -> None:
        namespace, backend, name = self._split(app_id)
        view = backend.view(self.cluster, namespace, name)
        if view.state is None:
            return
        if view.state.terminal:
            end = end_due(view, time.time())  # an app that ended keeps its end, finished where it was not yet
        else:
            end = JobEnd(State.CANCELLED, time.time(), "cancelled by request")
        # What stops the pods may not take at once (Volcano drops an abort while it restarts the
        # job): seen through, for a while, so that a cancel returns with its pods being stopped.
        deadline = time.monotonic() + _CANCEL_CHECK_S
        while end is not None:
            backend.end(self.cluster, namespace, view, end)
            if time.monotonic() > deadline:
                return
            time.sleep(0.5)
            view = backend.view(self.cluster, namespace, name)
            end = end_due(view, time.time()) if view.state is not None else None

    def _delete_existing(self, app_id: str) -> None:
        """Removes the app's objects (their pods with them, never orphaned)."""
        namespace, backend, name = self._split(app_id)
        if not backend.delete(self.cluster, namespace, name):
            raise self.unknown_app(app_id)
        try:
            self.cluster.delete("NetworkPolicy", name, namespace)  # -cfg network_policy's, if the app had one
        except KubernetesError as error:
            if error.status != 403:  # a user who may not touch NetworkPolicies made none
                raise

    def close(self) -> None:
        # Jobs belong to the cluster, not this process: they outlive the CLI that started them.
        if self._cluster is not None:
            self._cluster.connection.api.close()
            self._cluster = None

    def _split(self, app_id: str) -> tuple[str, Workload, str]:
        """``namespace:name`` (job), ``namespace:jobset:name`` or ``namespace:volcano:name``."""
        parts = app_id.split(":")
        name = parts[-1]
        namespace = (parts[0] if len(parts) > 1 and parts[0] else self.cluster.connection.namespace)
        backend = WORKLOAD_OF_BACKEND.get(parts[1] if len(parts) == 3 else "job")
        if backend is None or len(parts) > 3:
            raise InvalidArgumentError(f"invalid kubernetes app id {app_id!r}: expected NAMESPACE:NAME, "
                                       "NAMESPACE:jobset:NAME or NAMESPACE:volcano:NAME")
        return namespace, backend, name


def create_scheduler(session_name: str, **kwargs: Any) -> KubernetesScheduler:
    return KubernetesScheduler(session_name)


def _options(cfg: Mapping[str, Any]) -> ManifestOptions:
    namespace = cfg.get("namespace") or _context_namespace()
    return ManifestOptions(
        namespace=namespace,
        backend=cfg.get("backend") or "job",
        queue=cfg.get("queue") or None,
        service_account=cfg.get("service_account") or None,
        priority_class=cfg.get("priority_class") or None,
        node_selector=dict(cfg.get("node_selector") or {}),
        tolerations=tuple(cfg.get("tolerations") or ()),
        image_pull_secrets=tuple(cfg.get("image_pull_secrets") or ()),
        image_pull_policy=cfg.get("image_pull_policy") or None,
        shm_size=cfg.get("shm_size") or "auto",
        numa_aligned=cfg.get("numa_aligned"),
        gpu_resource=cfg.get("gpu_resource") or None,
        image_pull_timeout_s=seconds_option(cfg, "image_pull_timeout", DEFAULT_PULL_TIMEOUT_S),
        cancel_grace_s=seconds_option(cfg, "cancel_grace", DEFAULT_CANCEL_GRACE_S),
        reserved_millicpu=_or_default(cfg.get("reserved_millicpu"), DEFAULT_RESERVED_MILLICPU),
        reserved_memmb=_or_default(cfg.get("reserved_memmb"), DEFAULT_RESERVED_MEMMB),
        efa_device_count=cfg.get("efa_device_count"),
        validate_spec=_or_default(cfg.get("validate_spec"), True),
        network_policy=bool(cfg.get("network_policy")),
        network_peers=tuple(cfg.get("network_peers") or ()),
        run_as_user=cfg.get("run_as_user"),
    )


def _or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _context_namespace() -> str:
    # The dry-run needs no server, only the kubeconfig's current context (if any).
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts()
        return str((active or {}).get("context", {}).get("namespace") or "default")
    except Exception:  # no kubeconfig, or one the client cannot read: the API's default
        return "default"


def job_response(app_id: str, view: KubernetesJobView) -> DescribeAppResponse:
    """What describe answers for the app ``view`` read (torchx status's words)."""
    assert view.state is not None  # an app with no objects is not described
    failing = view.failing
    error = None
    if failing is not None and view.state is State.FAILED:
        error = ErrorReport(message=failing.root_cause or failing.reason or view.message,
                            error_code=failing.exit_code, timestamp=int(failing.finished_at or time.time()))
    return describe_response(JobView(
        app_id, view.state,
        roles=[Role(name=role.name, image=role.image, num_replicas=role.replicas, min_replicas=role.min_replicas)
               for role in view.roles],
        replicas=[ReplicaReport(replica.role, replica.replica_id, replica.state, f"{replica.hostname}.{view.app_id}",
                                error if replica is failing else None)
                  for replica in view.replicas],
        num_restarts=view.restarts, error=error, message=view.message, last_failure=view.last_failure,
        spares=view.spares, elastic={role.name: role.min_replicas for role in view.roles if role.elastic}))


def _app_id(namespace: str, backend: str, name: str) -> str:
    return f"{namespace}:{name}" if backend == "job" else f"{namespace}:{backend}:{name}"

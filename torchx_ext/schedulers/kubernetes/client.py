"""The thin step: the official ``kubernetes`` client, raw JSON in and out, one-line errors.

Reads use ``_preload_content=False`` and ``json.loads``: turning a 1000-pod list into the
client's model objects costs more than the request itself, and the models drop fields a
client older than the server does not know.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from torchx_ext.errors import KubernetesError
from torchx_ext.schedulers.kubernetes.request import KubernetesJobRequest

_PLURAL = {"Job": "jobs.batch", "Service": "services", "Pod": "pods",
           "NetworkPolicy": "networkpolicies.networking.k8s.io", "JobSet": "jobsets.jobset.x-k8s.io",
           "Volcano Job": "jobs.batch.volcano.sh", "Command": "commands.bus.volcano.sh",
           "Workload": "workloads.kueue.x-k8s.io"}


EXEC_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CustomKind:
    """A custom resource we create or read, and what a cluster without it needs installed."""

    kind: str
    """As messages name it."""
    group: str
    version: str
    plural: str
    install: str


JOBSET = CustomKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets",
                    "install JobSet (https://jobset.sigs.k8s.io) or use -cfg backend=job")
VOLCANO_JOB = CustomKind("Volcano Job", "batch.volcano.sh", "v1alpha1", "jobs",
                         "install Volcano (https://volcano.sh) or use -cfg backend=job")
VOLCANO_COMMAND = CustomKind("Command", "bus.volcano.sh", "v1alpha1", "commands", "install Volcano (https://volcano.sh)")
KUEUE_WORKLOAD = CustomKind("Workload", "kueue.x-k8s.io", "v1beta1", "workloads", "install Kueue (https://kueue.sigs.k8s.io)")
KUEUE_LOCAL_QUEUE = CustomKind("LocalQueue", "kueue.x-k8s.io", "v1beta1", "localqueues",
                               "install Kueue (https://kueue.sigs.k8s.io)")
VOLCANO_QUEUE = CustomKind("Volcano Queue", "scheduling.volcano.sh", "v1beta1", "queues", "install Volcano (https://volcano.sh)")
CUSTOM_KINDS = {(f"{custom.group}/{custom.version}", "Job" if custom is VOLCANO_JOB else custom.kind): custom
                for custom in (JOBSET, VOLCANO_JOB, VOLCANO_COMMAND, KUEUE_WORKLOAD)}


@dataclass
class Connection:
    api: Any
    """kubernetes.client.ApiClient"""
    server: str
    namespace: str
    """The kubeconfig context's namespace, else ``default``."""


def connect() -> Connection:
    """A client for the kubeconfig's current context (``KUBECONFIG``, ``~/.kube/config``), or
    the pod's service account when running in a cluster."""
    from kubernetes import client, config

    configuration = client.Configuration()
    namespace = "default"
    try:
        config.load_kube_config(client_configuration=configuration)
        _, active = config.list_kube_config_contexts()
        namespace = (active or {}).get("context", {}).get("namespace") or "default"
    except (config.ConfigException, OSError, TypeError) as kube_error:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            raise KubernetesError(
                f"no Kubernetes configuration: {kube_error}; point KUBECONFIG at a kubeconfig (or ~/.kube/config) "
                "whose current context is the cluster to use"
            ) from None
        try:
            with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as file:
                namespace = file.read().strip() or namespace
        except OSError:
            pass
    # One quick retry: an unreachable server should say so in seconds, not after urllib3's
    # default backoff.
    configuration.retries = 1
    return Connection(client.ApiClient(configuration), configuration.host, namespace)


class Cluster:
    def __init__(self, connection: Connection) -> None:
        from kubernetes import client

        self.connection = connection
        self.core = client.CoreV1Api(connection.api)
        self.batch = client.BatchV1Api(connection.api)
        self.custom = client.CustomObjectsApi(connection.api)
        self.networking = client.NetworkingV1Api(connection.api)

    def create_app(self, manifests: KubernetesJobRequest, validate: bool = True) -> None:
        """Its objects in order; all or nothing: what was created is deleted again when a later
        object is refused. ``validate`` (torchx's ``validate_spec``): every object goes through
        the API server's dry run first, so that a refused one leaves nothing to delete."""
        namespace = manifests.namespace
        if validate:
            for obj in manifests.objects:
                self._create(obj, namespace, dry_run=True)
        created: list[tuple[str | CustomKind, str]] = []
        try:
            for obj in manifests.objects:
                created.append(self._create(obj, namespace))
        except KubernetesError:
            for kind, name in reversed(created):
                if isinstance(kind, CustomKind):
                    self.delete_custom(kind, name, namespace)
                else:
                    self.delete(kind, name, namespace)
            raise

    def _create(self, obj: dict[str, Any], namespace: str, dry_run: bool = False) -> tuple[str | CustomKind, str]:
        name = obj["metadata"]["name"]
        how = {"dry_run": "All"} if dry_run else {}
        custom = CUSTOM_KINDS.get((obj["apiVersion"], obj["kind"]))
        if custom is not None:
            self.create_custom(custom, namespace, obj, dry_run)
            return custom, name
        if obj["kind"] == "Service":
            self._call("create", "Service", name, namespace,
                       lambda: self.core.create_namespaced_service(namespace, obj, _preload_content=False, **how))
            return "Service", name
        if obj["kind"] == "NetworkPolicy":
            self._call("create", "NetworkPolicy", name, namespace, lambda: self.networking.create_namespaced_network_policy(
                namespace, obj, _preload_content=False, **how))
            return "NetworkPolicy", name
        self._call("create", "Job", name, namespace,
                   lambda: self.batch.create_namespaced_job(namespace, obj, _preload_content=False, **how))
        return "Job", name

    def create_custom(self, custom: CustomKind, namespace: str, obj: dict[str, Any],
                      dry_run: bool = False) -> dict[str, Any]:
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        how = {"dry_run": "All"} if dry_run else {}
        try:
            response = self._call("create", custom.kind, name, namespace, lambda: self.custom.create_namespaced_custom_object(
                custom.group, custom.version, namespace, custom.plural, obj, _preload_content=False, **how))
        except KubernetesError as error:
            raise self._missing_api(custom, error) from None
        created: dict[str, Any] = json.loads(response.data)
        return created

    def get_custom(self, custom: CustomKind, name: str, namespace: str) -> dict[str, Any] | None:
        """The object, or None when it (or its whole API, when the CRD is not installed) is not there."""
        try:
            response = self._call("get", custom.kind, name, namespace, lambda: self.custom.get_namespaced_custom_object(
                custom.group, custom.version, namespace, custom.plural, name, _preload_content=False))
        except KubernetesError as error:
            if error.status == 404:
                return None
            raise
        found: dict[str, Any] = json.loads(response.data)
        return found

    def list_custom(self, custom: CustomKind, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The objects; none when the CRD is not installed."""
        try:
            return self._items("list", custom.kind, namespace, lambda: self.custom.list_namespaced_custom_object(
                custom.group, custom.version, namespace, custom.plural, label_selector=selector,
                _preload_content=False))
        except KubernetesError as error:
            if error.status == 404 and "namespaces" not in str(error):
                return []
            raise

    def names_of(self, custom: CustomKind, namespace: str | None) -> list[str] | None:
        """The names of the ``custom`` objects in ``namespace`` (None: cluster-scoped ones), or None
        when the cluster lacks that API."""
        if namespace is None:
            call = lambda: self.custom.list_cluster_custom_object(  # noqa: E731
                custom.group, custom.version, custom.plural, _preload_content=False)
        else:
            call = lambda: self.custom.list_namespaced_custom_object(  # noqa: E731
                custom.group, custom.version, namespace, custom.plural, _preload_content=False)
        try:
            items = self._items("list", custom.kind, namespace or "", call)
        except KubernetesError as error:
            if error.status == 404:
                return None
            raise
        return sorted(str(item["metadata"]["name"]) for item in items)

    def patch_custom(self, custom: CustomKind, name: str, namespace: str, patch: dict[str, Any]) -> None:
        self._call("update", custom.kind, name, namespace, lambda: self.custom.patch_namespaced_custom_object(
            custom.group, custom.version, namespace, custom.plural, name, patch, _preload_content=False))

    def delete_custom(self, custom: CustomKind, name: str, namespace: str) -> bool:
        """Deletes ``name`` and, in the background, what it owns. False when it was already gone."""
        from kubernetes.client import V1DeleteOptions

        try:
            self._call("delete", custom.kind, name, namespace, lambda: self.custom.delete_namespaced_custom_object(
                custom.group, custom.version, namespace, custom.plural, name,
                body=V1DeleteOptions(propagation_policy="Background"), _preload_content=False))
        except KubernetesError as error:
            if error.status == 404:
                return False
            raise
        return True

    @staticmethod
    def _missing_api(custom: CustomKind, error: KubernetesError) -> KubernetesError:
        if error.status == 404 and "namespace" not in str(error).split("(404)", 1)[-1]:
            return KubernetesError(f"the cluster has no {custom.kind} API ({custom.plural}.{custom.group}/"
                                   f"{custom.version}): {custom.install}", 404, error.reason)
        return error

    def admission_refusal(self, namespace: str, pod: dict[str, Any]) -> str | None:
        """The server's words when its admission refuses ``pod`` (403 naming PodSecurity) on a dry
        run, which creates nothing; None when admitted, or when this user may not create pods."""
        try:
            self._call("create", "Pod", "", namespace, lambda: self._dry_run_pod(namespace, pod))
        except _Refused as refused:
            return refused.message
        except KubernetesError as error:
            if error.status != 403:
                raise
        return None

    def _dry_run_pod(self, namespace: str, pod: dict[str, Any]) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return self.core.create_namespaced_pod(namespace, pod, dry_run="All", _preload_content=False)
        except ApiException as error:
            message = _message(error.body)
            if error.status == 403 and "PodSecurity" in message:
                raise _Refused(message) from None
            raise

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self._items("list", "Job", namespace, lambda: self.batch.list_namespaced_job(
            namespace, label_selector=selector, _preload_content=False))

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self._items("list", "Pod", namespace, lambda: self.core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False))

    def read_pod(self, name: str, namespace: str) -> dict[str, Any]:
        response = self._call("read", "Pod", name, namespace, lambda: self.core.read_namespaced_pod(
            name, namespace, _preload_content=False))
        pod: dict[str, Any] = json.loads(response.data)
        return pod

    def exec_in_pod(self, pod: str, namespace: str, command: list[str], timeout_s: float = EXEC_TIMEOUT_S) -> None:
        """Run ``command`` in the pod's (first) container through the API server's exec; raises
        KubernetesError with its output when it fails."""
        from kubernetes.stream import stream

        def run() -> tuple[int | None, str]:
            client = stream(self.core.connect_get_namespaced_pod_exec, pod, namespace, command=command, stderr=True,
                            stdin=False, stdout=True, tty=False, _preload_content=False)
            try:
                client.run_forever(timeout=timeout_s)
                return client.returncode, str(client.read_all())
            finally:
                client.close()

        code, output = self._call("exec in", "Pod", pod, namespace, run)
        if code != 0:
            raise KubernetesError(f"{' '.join(command)!r} in pod {namespace}/{pod} "
                                  f"{'did not end' if code is None else f'exited with {code}'}: {output.strip()[-300:]}")

    def pods_and_version(self, namespace: str, selector: str) -> tuple[list[dict[str, Any]], str]:
        """The pods and the version of the list (where a watch that misses nothing starts)."""
        response = self._call("list", "Pod", "", namespace, lambda: self.core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False))
        body = json.loads(response.data)
        return body.get("items") or [], str((body.get("metadata") or {}).get("resourceVersion") or "")

    def next_pod_event(self, namespace: str, selector: str, version: str, timeout_s: float) -> str | None:
        """Waits (up to ``timeout_s``, whole seconds as the API takes them) for the first change of a
        pod after ``version``; that change's version, or None when none came. ``WatchLost`` when
        the version is too old for the server to replay (410) or the stream broke: list again."""
        from urllib3.exceptions import HTTPError

        seconds = max(1, round(timeout_s))
        response = self._call("watch", "Pod", "", namespace, lambda: self.core.list_namespaced_pod(
            namespace, label_selector=selector, watch=True, resource_version=version or None,
            timeout_seconds=seconds, _request_timeout=seconds + WATCH_SLACK_S, _preload_content=False))
        try:
            for line in lines_of(response):
                event = json.loads(line) if line.strip() else {}
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    return str(event["object"]["metadata"]["resourceVersion"])
                if event.get("type") == "ERROR":
                    raise WatchLost(str((event.get("object") or {}).get("message") or event))
        except (HTTPError, OSError, ValueError, KeyError) as error:
            raise WatchLost(f"{type(error).__name__}: {error}") from None
        finally:
            response.close()
        return None

    def patch_job(self, name: str, namespace: str, patch: dict[str, Any]) -> None:
        self._call("update", "Job", name, namespace,
                   lambda: self.batch.patch_namespaced_job(name, namespace, patch, _preload_content=False))

    def delete(self, kind: str, name: str, namespace: str) -> bool:
        """Deletes ``name``; dependents (a Job's pods) in the background, never orphaned.
        False when it was already gone."""
        from kubernetes.client import V1DeleteOptions

        options = V1DeleteOptions(propagation_policy="Background")
        call = {"Job": self.batch.delete_namespaced_job, "Service": self.core.delete_namespaced_service,
                "NetworkPolicy": self.networking.delete_namespaced_network_policy}[kind]
        try:
            self._call("delete", kind, name, namespace, lambda: call(name, namespace, body=options,
                                                                     _preload_content=False))
        except KubernetesError as error:
            if error.status == 404:  # gone already (or its whole namespace is)
                return False
            raise
        return True

    def pod_log(self, pod: str, namespace: str, container: str | None, *, follow: bool,
                since_seconds: int | None) -> Any:
        """The pod's log as a streaming HTTP response, each line prefixed by its timestamp."""
        kwargs: dict[str, Any] = {"follow": follow, "timestamps": True, "_preload_content": False}
        if container:
            kwargs["container"] = container
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        return self._call("read logs of", "Pod", pod, namespace,
                          lambda: self.core.read_namespaced_pod_log(pod, namespace, **kwargs))

    def _items(self, verb: str, kind: str, namespace: str, call: Any) -> list[dict[str, Any]]:
        response = self._call(verb, kind, "", namespace, call)
        items: list[dict[str, Any]] = json.loads(response.data)["items"] or []
        return items

    def _call(self, verb: str, kind: str, name: str, namespace: str, call: Any) -> Any:
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return call()
        except ApiException as error:
            raise KubernetesError(api_error_message(verb, kind, name, namespace, error.status, error.body),
                                  error.status, _reason(error.body)) from None
        except HTTPError as error:
            raise KubernetesError(
                f"cannot reach the Kubernetes API server at {self.connection.server} ({type(error).__name__}: "
                f"{getattr(error, 'reason', None) or error}): check the kubeconfig's server and that the cluster is up"
            ) from None


def api_error_message(verb: str, kind: str, name: str, namespace: str, status: int, body: object) -> str:
    """One line for an API error: what was refused, the server's words, what to do."""
    detail = _message(body)
    what = f"{kind} {name!r}" if name else _PLURAL.get(kind, kind)
    where = f"in namespace {namespace!r}"
    prefix = f"cannot {verb} {what} {where} ({status})"
    if status == 404 and "namespaces" in detail:
        return (f"{prefix}: namespace {namespace!r} does not exist: create it (kubectl create namespace "
                f"{namespace}) or give another with -cfg namespace=NAME")
    if status == 404:
        return f"{prefix}: not found: {detail}; `torchx list -s kubernetes` shows the apps there"
    if status == 403:
        return (f"{prefix}: forbidden: {detail}; ask the cluster's admin for access (RBAC) to Jobs, Services "
                f"and pods there, or give another namespace with -cfg namespace=NAME")
    if status == 401:
        return f"{prefix}: unauthorized: {detail}; renew the kubeconfig's credentials"
    if status == 409:
        return f"{prefix}: already exists: {detail}; delete it (torchx delete) or submit again for a new app id"
    if status == 422:
        return (f"{prefix}: the API server refused it as invalid: {detail}; fix the value it names (a -cfg option "
                "or the component's arguments; --dryrun prints what would be sent)")
    return f"{prefix}: the API server failed: {detail or 'no detail'}; try again, or ask the cluster's admin"


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _message(body: object) -> str:
    try:
        return str(json.loads(body or "{}").get("message") or "")  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        return str(body or "")


def _reason(body: object) -> str:
    try:
        return str(json.loads(body or "{}").get("reason") or "")  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        return ""


class WatchLost(Exception):
    """A watch that cannot go on from where it was (its version expired, its stream broke)."""


WATCH_SLACK_S = 10
"""How much longer than its own timeout a watch may take to close before the client gives up."""


def lines_of(response: Any, chunk_bytes: int = 1 << 16) -> Iterator[bytes]:
    """The response body's lines (with their ``\\n``), whole whatever the chunks' boundaries."""
    pending = b""
    try:
        for chunk in response.stream(chunk_bytes, decode_content=False):
            if not chunk:
                continue
            pending += chunk
            if b"\n" not in chunk:
                continue
            *whole, pending = pending.split(b"\n")
            for line in whole:
                yield line + b"\n"
        if pending:
            yield pending
    finally:
        response.release_conn()

"""The HTTP front: routes Kubernetes REST paths to the store's verbs and answers Status bodies on
errors. HTTP/1.1 keep-alive (the client pools connections); pod logs are streamed chunked."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.kubernetes.apiserver import api, errors
from tests.kubernetes.apiserver.logs import flag
from tests.kubernetes.apiserver.resources import (CUSTOM, JOBS, NAMESPACES, NETWORK_POLICIES, PODS, SERVICES,
                                                  VOLCANO_QUEUES, Obj, ResourceType)

if TYPE_CHECKING:
    from tests.kubernetes.apiserver.server import TestCluster

_NAME = r"([^/]+)"
ROUTES: list[tuple[re.Pattern[str], ResourceType, bool]] = [
    # (path, resource type, whether the path carries a namespace)
    (re.compile(r"^/api/v1/namespaces(?:/([^/]+))?$"), NAMESPACES, False),
    (re.compile(rf"^/api/v1/namespaces/{_NAME}/pods(?:/{_NAME})?(?:/(log|status|exec))?$"), PODS, True),
    (re.compile(rf"^/api/v1/namespaces/{_NAME}/services(?:/{_NAME})?(?:/(status))?$"), SERVICES, True),
    (re.compile(rf"^/apis/batch/v1/namespaces/{_NAME}/jobs(?:/{_NAME})?(?:/(status))?$"), JOBS, True),
    (re.compile(rf"^/apis/networking.k8s.io/v1/namespaces/{_NAME}/networkpolicies(?:/{_NAME})?(?:/(status))?$"), NETWORK_POLICIES, True),
    *((re.compile(rf"^/apis/{re.escape(custom.group)}/{custom.version}/namespaces/{_NAME}/{custom.plural}"
                  rf"(?:/{_NAME})?(?:/(status))?$"), custom, True) for custom in CUSTOM),
    (re.compile(rf"^/apis/{re.escape(VOLCANO_QUEUES.group)}/{VOLCANO_QUEUES.version}/queues(?:/{_NAME})?$"),
     VOLCANO_QUEUES, False),
    (re.compile(r"^/api/v1/pods$"), PODS, False),
    (re.compile(r"^/api/v1/services$"), SERVICES, False),
    (re.compile(r"^/apis/batch/v1/jobs$"), JOBS, False),
]
VERBS = {"GET": "get", "POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "ApiHttpServer"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: pytest captures stderr
        pass

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_DELETE = do_PATCH = do_PUT = do_GET

    def _serve(self) -> None:
        url = urlsplit(self.path)
        self._query_lists = parse_qs(url.query)  # exec's command: one value per argument
        query = {key: values[-1] for key, values in self._query_lists.items()}
        cluster = self.server.cluster
        cluster.request_log.append((self.command, url.path))
        body = self._read_body()
        try:
            injected = cluster.take_injected_failure(url.path)
            if injected is not None:
                raise errors.injected(injected)
            self._route(url.path, query, body)
        except errors.ApiError as error:
            self._send_json(error.code, error.status())
        except Exception as error:  # a bug in the fake: tell the client as the real server would
            self._send_json(500, errors.ApiError(500, "InternalError", f"fake API server: {error!r}").status())

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    def _route(self, path: str, query: dict[str, str], body: Any) -> None:
        if path in ("/version", "/version/"):
            self._send_json(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "platform": "linux/amd64"})
            return
        for pattern, rtype, namespaced in ROUTES:
            match = pattern.match(path)
            if match and rtype.group in self.server.cluster.missing_apis:
                break  # that CRD is not installed: the API answers as for any unknown path
            if match:
                groups = match.groups()
                if rtype is NAMESPACES or rtype is VOLCANO_QUEUES:
                    namespace, name, sub = "", groups[0], None
                elif namespaced:
                    namespace, name, sub = groups[0], groups[1], groups[2]
                else:
                    namespace, name, sub = "", None, None
                self._dispatch(rtype, namespace if namespaced else None, name, sub, query, body)
                return
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})

    def _dispatch(self, rtype: ResourceType, namespace: str | None, name: str | None, sub: str | None,
                  query: dict[str, str], body: Any) -> None:
        cluster, store = self.server.cluster, self.server.cluster.store
        verb = VERBS.get(self.command)
        if verb is None:
            raise errors.ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource")
        if verb == "get" and name is None:
            verb = "list"
        forbidden_ns = namespace if namespace is not None else (name if rtype is NAMESPACES else None)
        if forbidden_ns is not None and forbidden_ns in cluster.forbidden_namespaces:
            raise errors.forbidden(rtype.plural, rtype.group, verb, forbidden_ns, name or "")
        ns = namespace or ""
        if sub == "exec":
            self._send_exec(ns, str(name), query)
            return
        if sub == "log":
            if verb != "get":
                raise errors.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            self._send_log(ns, str(name), query)
            return
        if verb == "list" and flag(query, "watch"):
            self._send_watch(rtype, namespace, query)
        elif verb == "list":
            items, version = store.list(rtype, namespace, query.get("labelSelector"))
            self._send_json(200, {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version,
                                  "metadata": {"resourceVersion": version}, "items": items})
        elif verb == "create":
            if name is not None or not isinstance(body, dict):
                raise errors.bad_request("the body of the request was in an unknown format")
            if rtype.namespaced and not store.namespace_exists(ns):
                raise errors.not_found("namespaces", "", ns)
            self._send_json(201, store.create(rtype, ns, body, dry_run=query.get("dryRun") == "All"))
        elif verb == "get":
            self._send_json(200, store.get(rtype, ns, str(name)))
        elif verb == "delete":
            options = dict(body) if isinstance(body, dict) else {}
            for key in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
                if key in query:
                    options[key] = int(query[key]) if key == "gracePeriodSeconds" else (
                        flag(query, key) if key == "orphanDependents" else query[key])
            self._send_json(200, api.delete(store, rtype, ns, str(name), options))
        elif verb == "patch":
            self._send_json(200, api.patch(store, rtype, ns, str(name), self.headers.get("Content-Type", ""), body))
        elif verb == "update":
            if not isinstance(body, dict):
                raise errors.bad_request("the body of the request was in an unknown format")
            self._send_json(200, api.replace(store, rtype, ns, str(name), body))

    def _send_watch(self, rtype: ResourceType, namespace: str | None, query: dict[str, str]) -> None:
        """A watch: one JSON event per line, from ``resourceVersion`` (now when absent) until
        ``timeoutSeconds`` (the server's default, 30 min, when absent) or the client leaves."""
        store = self.server.cluster.store
        since = int(query.get("resourceVersion") or store.resource_version)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while (left := deadline - time.monotonic()) > 0:
                events, since = store.changes(rtype, namespace, query.get("labelSelector"), since, min(left, 1.0))
                for kind, obj in events:
                    line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_log(self, namespace: str, name: str, query: dict[str, str]) -> None:
        # Resolving the container first lets a waiting one answer 400 before any byte is streamed.
        chunks = self.server.cluster.kubelet.pod_logs(namespace, name, query)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client stopped reading (e.g. closed a follow stream)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def _send_exec(self, namespace: str, name: str, query: dict[str, str]) -> None:
        """A pod's exec over a WebSocket, as the kubernetes client asks for it (``v4.channel.k8s.io``:
        each message's first byte names its channel, 1 stdout, 2 stderr, 3 the end's status)."""
        if self.headers.get("Upgrade", "").lower() != "websocket":
            raise errors.bad_request("Upgrade request required")
        command = self._query_lists.get("command") or []
        if not command:
            raise errors.bad_request("you must specify at least 1 command")
        out, err, code = self.server.cluster.kubelet.pod_exec(namespace, name, query.get("container"), command)
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + _WEBSOCKET_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        status: Obj = {"metadata": {}, "status": "Success"} if code == 0 else {
            "metadata": {}, "status": "Failure", "message": f"command terminated with non-zero exit code: {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        for channel, data in ((1, out), (2, err), (3, json.dumps(status).encode())):
            if data:
                self.wfile.write(_websocket_frame(0x2, bytes([channel]) + data))
        self.wfile.write(_websocket_frame(0x8, b"\x03\xe8"))  # close, 1000: normal
        self.wfile.flush()
        self.close_connection = True

    def _send_json(self, code: int, payload: Obj) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


_WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's


def _websocket_frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked frame (a server's)."""
    length = len(payload)
    if length < 126:
        header = bytes([0x80 | opcode, length])
    elif length < 1 << 16:
        header = bytes([0x80 | opcode, 126]) + length.to_bytes(2, "big")
    else:
        header = bytes([0x80 | opcode, 127]) + length.to_bytes(8, "big")
    return header + payload


class ApiHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cluster: "TestCluster", port: int = 0) -> None:
        self.cluster = cluster
        super().__init__(("127.0.0.1", port), Handler)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fake-kube-apiserver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that closes its connection (a log reader that stopped early, a pooled
        # connection dropped) is routine, not an error worth a traceback.
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

"""How a torchft job ends: its lighthouse runs until every replica group is done.

torchft's lighthouse never exits by itself, and a torchx app succeeds only when each of its roles
has. So each group's launcher, once its workers have all succeeded, tells the lighthouse role (on
``ending_port``) every ``POLL_S`` until the lighthouse answers ``END`` (every group is done); it
then goes on telling it so (``ended``) until the lighthouse answers ``BYE`` (every group heard
``END``), or cannot be reached for ``AFTER_END_S``. The lighthouse exits 0 once it has said ``BYE``
to each group, after ``LINGER_S``. A lighthouse started again at any point hears from the groups
again within ``POLL_S``, and one group's ``ended`` tells it that every group was done: the groups
hold what is done, the lighthouse only counts.

A group also asks, before its workers start, whose lighthouse it reached (``GET /job``): jobs that
share a host and were given the same port would otherwise train in each other's quorum.

``EndBook`` decides (pure); the HTTP server and client around it only carry its answers.
"""

from __future__ import annotations

import errno
import json
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from torchx_ext.errors import InvalidArgumentError

POLL_S = 0.5
AFTER_END_S = 10.0
"""How long a group that heard ``END`` keeps telling a lighthouse it cannot reach (one being started
again must hear that every group was done) before it exits."""
LINGER_S = 2.0
"""How long the lighthouse keeps answering ``BYE`` after the last group heard it."""
WAIT, END, BYE = "wait", "end", "bye"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""No proxy: the lighthouse is a peer of the job, never behind the user's HTTP proxy."""


@dataclass
class EndBook:
    """Which groups said they are done, and which heard that every group is."""

    groups: int
    done: set[int] = field(default_factory=set)
    told: set[int] = field(default_factory=set)

    def report(self, group: int, ended: bool = False) -> str:
        """``group`` is done (``ended``: and heard earlier that every group was): ``WAIT``, ``END``
        (every group is done) or ``BYE`` (every group heard it)."""
        self.done |= set(range(self.groups)) if ended else {group}
        if len(self.done) < self.groups:
            return WAIT
        self.told.add(group)
        return BYE if self.everyone_told else END

    @property
    def everyone_told(self) -> bool:
        return len(self.told) >= self.groups


class _DualStackServer(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 too, as the lighthouse's [::]
        super().server_bind()


class _IPv4Server(ThreadingHTTPServer):
    daemon_threads = True


class EndServer:
    """The lighthouse's side: answers ``GET /job`` and ``GET /done?group=N[&ended=1]`` on ``port`` of
    ``host`` (every interface when empty: IPv6 and IPv4, else IPv4)."""

    def __init__(self, port: int, groups: int, job: str, host: str = "") -> None:
        self.book = EndBook(groups)
        self.job = job
        self.changed = threading.Condition()
        self.server: ThreadingHTTPServer
        if host:
            self.server = (_DualStackServer if ":" in host else _IPv4Server)((host, port), _handler(self))
        else:
            try:
                self.server = _DualStackServer(("::", port), _handler(self))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:  # the port's, not IPv6's
                    raise
                self.server = _IPv4Server(("", port), _handler(self))  # a host without IPv6
        self.thread = threading.Thread(target=self.server.serve_forever, name="torchft-ending", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def answer(self, group: int, ended: bool) -> str:
        with self.changed:
            said = self.book.report(group, ended)
            self.changed.notify_all()
            return said

    def wait_until_everyone_told(self, timeout_s: float | None = None) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.book.everyone_told, timeout_s)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(ending: EndServer) -> type[BaseHTTPRequestHandler]:
    # http.server wants a class; it reaches its server's state through this closure's one name.
    class DoneHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            group = (query.get("group") or [""])[0]
            if url.path == "/job":
                self._send({"job": ending.job})
            elif url.path == "/done" and group.isdigit() and int(group) < ending.book.groups:
                self._send({"answer": ending.answer(int(group), (query.get("ended") or [""])[0] == "1")})
            else:
                self.send_error(404, f"expected GET /job or /done?group=0..{ending.book.groups - 1}")

        def _send(self, answer: dict[str, str]) -> None:
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
            pass  # one request per group every half second: not worth a log line each

    return DoneHandler


def _ask(url: str, key: str, timeout_s: float) -> str | None:
    """The lighthouse's answer under ``key``; None when it could not be asked or said nothing usable."""
    try:
        with _DIRECT.open(url, timeout=timeout_s) as response:
            answer = json.loads(response.read().decode())
        return str(answer[key]) if isinstance(answer, dict) and key in answer else None
    except Exception:  # unreachable, refused, cut short, not ours: the caller polls again
        return None


def _url(host: str, port: int, path: str) -> str:
    return f"http://{f'[{host}]' if ':' in host and not host.startswith('[') else host}:{port}{path}"


def check_the_lighthouse(host: str, port: int, job: str, timeout_s: float, poll_s: float = POLL_S) -> None:
    """Waits until the lighthouse at ``host:port`` (its ending port) answers, and checks that it is
    ``job``'s: InvalidArgumentError, in one line, when it is another job's or never answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        whose = _ask(_url(host, port, "/job"), "job", timeout_s=max(poll_s * 4, 2.0))
        if whose == job:
            return
        if whose is not None:
            raise InvalidArgumentError(
                f"the torchft lighthouse at {host}:{port - 1} is job {whose!r}'s, not {job!r}'s: jobs that share "
                "a host need different ports (dist.hsdp --lighthouse_port)")
        if time.monotonic() >= deadline:
            raise InvalidArgumentError(
                f"no torchft lighthouse answered at {host}:{port} (job {job!r}) within {timeout_s:g} s")
        time.sleep(poll_s)


def wait_for_the_end(host: str, port: int, group: int, say: Callable[[str], None] = lambda line: None,
                     poll_s: float = POLL_S, after_end_s: float = AFTER_END_S) -> None:
    """A done group's side: tell the lighthouse at ``host:port`` until every group heard that all are
    done, however long the lighthouse takes to answer (a lighthouse lost for good fails the job)."""
    ended_at: float | None = None
    said_waiting = False
    while True:
        query = f"/done?group={group}" + ("&ended=1" if ended_at is not None else "")
        answer = _ask(_url(host, port, query), "answer", timeout_s=max(poll_s * 4, 2.0))
        if answer == BYE:
            return
        if answer is None and ended_at is not None and time.monotonic() - ended_at >= after_end_s:
            return  # every group was done; the lighthouse has gone since, or is gone for good
        if answer == END:
            ended_at = time.monotonic()  # it still answers: keep telling it until it says bye
        if answer == WAIT and not said_waiting:
            say(f"replica group {group} is done; waiting for the other groups (lighthouse {host}:{port - 1})")
            said_waiting = True
        time.sleep(poll_s)


def print_line(line: str) -> None:
    print(f"[torchx_ext.ft] {line}", file=sys.stderr, flush=True)

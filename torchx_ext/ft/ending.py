"""How a torchft job ends: its lighthouse runs until every replica group is done.

torchft's lighthouse never exits by itself, and a torchx app succeeds only when each of its roles
has. So each group's launcher, once its workers have all succeeded, tells the lighthouse role
(on ``ending_port``) and keeps telling it, every ``POLL_S``, until the lighthouse answers that
every group is done; the lighthouse exits 0 once it has told every group so. A lighthouse started
again after some groups were done hears from them again within ``POLL_S``: the groups hold what
is done, the lighthouse only counts.

``EndBook`` decides (pure); the HTTP server and client around it only carry its answers.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

POLL_S = 0.5
GIVE_UP_S = 120.0
"""How long a done group keeps trying a lighthouse it cannot reach before it exits anyway (its
work is done; a lighthouse lost for good fails its own role)."""
END, WAIT = "end", "wait"


@dataclass
class EndBook:
    """Which groups said they are done, and which of them heard that every group is."""

    groups: int
    done: set[str] = field(default_factory=set)
    told: set[str] = field(default_factory=set)

    def report(self, group: str) -> str:
        """``group`` is done: ``END`` once every group is, else ``WAIT``."""
        self.done.add(group)
        if len(self.done) < self.groups:
            return WAIT
        self.told.add(group)
        return END

    @property
    def everyone_told(self) -> bool:
        return len(self.told) >= self.groups


class EndServer:
    """The lighthouse's side: answers ``GET /done?group=ID`` on ``port`` of ``host`` ("": every interface)."""

    def __init__(self, port: int, groups: int, host: str = "") -> None:
        self.book = EndBook(groups)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="torchft-ending", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def answer(self, group: str) -> str:
        with self.changed:
            said = self.book.report(group)
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
            group = (parse_qs(url.query).get("group") or [""])[0]
            if url.path != "/done" or not group:
                self.send_error(404, "expected GET /done?group=ID")
                return
            body = json.dumps({"answer": ending.answer(group)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
            pass  # one request per group every half second: not worth a log line each

    return DoneHandler


def wait_for_the_end(host: str, port: int, group: str, say: Callable[[str], None] = lambda line: None,
                     poll_s: float = POLL_S, give_up_s: float = GIVE_UP_S) -> bool:
    """A done group's side: tell the lighthouse at ``host:port`` until it answers that every group is
    done (True), or until it has not answered for ``give_up_s`` (False)."""
    url = f"http://{_bracketed(host)}:{port}/done?group={group}"
    last_answer = time.monotonic()
    said_waiting = False
    while True:
        try:
            with urllib.request.urlopen(url, timeout=max(poll_s * 4, 2.0)) as response:
                answer = json.loads(response.read().decode()).get("answer")
            last_answer = time.monotonic()
            if answer == END:
                return True
            if not said_waiting:
                say(f"replica group {group} is done; waiting for the other groups (lighthouse {host}:{port})")
                said_waiting = True
        except (OSError, ValueError, urllib.error.URLError):
            if time.monotonic() - last_answer >= give_up_s:
                return False
        time.sleep(poll_s)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def print_line(line: str) -> None:
    print(f"[torchx_ext.ft] {line}", file=sys.stderr, flush=True)

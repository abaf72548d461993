"""The process that ends a local_docker job when one of its replicas fails for good.

The engine restarts a failed replica by itself (its ``on-failure`` policy, ``max_retries``
times), but not one killed (``docker kill``: the watcher starts that one again, within
``max_retries``), nor one its HEALTHCHECK calls unhealthy (a frozen replica: the watcher kills it,
and one paused for over 10 s), and does not stop the others when one gives up; without this watcher they would wait
at a barrier for a peer that is gone. ``schedule`` starts one per job, detached from the CLI;
it follows the engine's events for the job's containers and exits when the job has ended
and none of its containers runs. Tracking never depends on it: any describe of a job whose
watcher is gone ends the job the same way.

    python -m torchx_ext.schedulers.docker.watcher APP_ID
"""

from __future__ import annotations

import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from torchx_ext.liveness import DEFAULT_MAX_AGE_S
from torchx_ext.schedulers.docker.client import connect
from torchx_ext.schedulers.docker.request import LABEL_APP_ID
from torchx_ext.schedulers.docker.snapshot import (Snapshot, end_if_failed, kill_if_frozen, restart_app_if_failed,
                                                  restart_if_lost, snapshot)


def watcher_log(app_id: str) -> Path:
    """Where the watcher of ``app_id`` writes what went wrong; removed when it ends cleanly."""
    return Path(tempfile.gettempdir()) / f"torchx_ext_docker-{os.getuid()}" / f"{app_id}.log"


def watch(app_id: str) -> int:
    engine = connect()
    # Subscribed before the first look, so that nothing that happens in between is missed. A
    # health change wakes it (an unhealthy replica is frozen); a pause too, whose unhealthy mark
    # the engine sets without an event, and which is judged by how long it lasts.
    events = engine.client.events(
        decode=True, filters={"type": "container", "label": f"{LABEL_APP_ID}={app_id}",
                              "event": ["die", "destroy", "health_status", "pause", "unpause"]}
    )
    woken: queue.Queue[object] = queue.Queue()
    threading.Thread(target=_pump, args=(events, woken), daemon=True).start()
    paused_since: dict[str, float] = {}
    try:
        while True:
            current = snapshot(engine, app_id)
            paused_too_long = _paused_too_long(current, paused_since)
            current = kill_if_frozen(engine, current, paused_too_long)
            current = end_if_failed(engine, restart_if_lost(engine, restart_app_if_failed(engine, current)))
            if not current.containers:
                return 0  # deleted
            if current.end is not None and current.running:
                # An end is recorded but its author (a cancel) did not get to stop everything.
                engine.stop(current.running, current.grace_s)
                continue
            if current.view.state is not None and current.view.state.terminal and not current.running:
                return 0
            try:
                if woken.get(timeout=_PAUSE_POLL_S if paused_since else None) is _ENDED:
                    return 1  # the engine closed the stream: it stopped or restarted
            except queue.Empty:
                pass  # a pause went on for another second
    finally:
        events.close()


_ENDED = object()
_PAUSE_POLL_S = 1.0


def _pump(events: Iterator[object], woken: queue.Queue[object]) -> None:
    try:
        for event in events:
            woken.put(event)
    except Exception:  # the engine went away mid-stream: as a closed stream
        pass
    finally:
        woken.put(_ENDED)


def _paused_too_long(current: Snapshot, paused_since: dict[str, float]) -> frozenset[str]:
    """The containers paused for longer than a frozen launcher may stay silent."""
    now = time.monotonic()
    paused = {view.name for view, _ in current.containers if view.status == "paused"}
    for name in set(paused_since) - paused:
        del paused_since[name]
    for name in paused:
        paused_since.setdefault(name, now)
    return frozenset(name for name, since in paused_since.items() if now - since > DEFAULT_MAX_AGE_S)


def main(argv: list[str]) -> int:
    # It waits most of its life; at a job's start it must not take CPU from the replicas.
    os.nice(10)
    if len(argv) != 1:
        print("usage: python -m torchx_ext.schedulers.docker.watcher APP_ID", file=sys.stderr)
        return 2
    code = watch(argv[0])
    if code == 0:
        watcher_log(argv[0]).unlink(missing_ok=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

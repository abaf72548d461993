"""`describe` of a 1000-replica kubernetes job against the test API server: time and requests,
for each backend, and torchx's builtin (a Volcano Job) as the baseline.

Starts the fake API server of the test suite (tests/kubernetes/apiserver) on loopback, submits
``dist.ddp -j 1000x1`` through our scheduler with the pods held unscheduled (1000 pod objects,
no containers), waits for the controllers (Job, JobSet, Volcano stand-ins) to create every
pod, then times ``describe`` and counts the HTTP requests each one makes. Targets: under 1 s,
and the same number of requests whatever the replica count (it also measures 10 replicas to
show that). The baseline is torchx's builtin ``kubernetes`` scheduler describing the Volcano
Job it submits for the same AppDef (one GET, replica states from the job's task counts only).
Needs a Docker engine (DOCKER_HOST or the test engine's socket) only for the fake's kubelet.

    .venv/bin/python scripts/bench/k8s_describe.py [--replicas 1000] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.fixtures.docker_engine import PRIVATE_SOCKET  # noqa: E402
from tests.kubernetes.apiserver import TestCluster  # noqa: E402
from tests.kubernetes.apiserver.resources import PODS  # noqa: E402

TARGET_S = 1.0


def measure(cluster: TestCluster, replicas: int, runs: int, backend: str) -> tuple[float, int]:
    from torchx_ext.components.dist import ddp

    app = ddp(script="train.py", j=f"{replicas}x1", cpu=1, image="bench:1")
    if backend == "torchx":
        from torchx.schedulers.kubernetes_scheduler import KubernetesScheduler as Builtin

        scheduler: Any = Builtin("bench")
        app_id = scheduler.schedule(scheduler.submit_dryrun(app, cfg={"namespace": "default", "queue": "default"}))
    else:
        from torchx_ext.schedulers.kubernetes.scheduler import KubernetesScheduler

        scheduler = KubernetesScheduler("bench")
        app_id = scheduler.schedule(scheduler.submit_dryrun(app, cfg={"namespace": "default", "backend": backend}))
    deadline = time.monotonic() + 120
    while len(cluster.store.list(PODS, "default")[0]) < replicas and time.monotonic() < deadline:
        time.sleep(0.2)
    times, requests = [], 0
    for _ in range(runs):
        before = cluster.requests()
        started = time.perf_counter()
        described = scheduler.describe(app_id)
        times.append(time.perf_counter() - started)
        requests = cluster.requests() - before
        assert described is not None
        assert backend == "torchx" or len(described.roles_statuses[0].replicas) == replicas
    if backend == "torchx":
        from tests.kubernetes.apiserver.resources import VOLCANO_JOBS

        for job in cluster.store.list(VOLCANO_JOBS, "default")[0]:
            cluster.store.remove(VOLCANO_JOBS, "default", job["metadata"]["name"])
    else:
        scheduler.delete(app_id)
    deadline = time.monotonic() + 60
    while cluster.store.list(PODS, "default")[0] and time.monotonic() < deadline:
        time.sleep(0.2)
    scheduler.close()
    return statistics.median(times), requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("DOCKER_HOST", PRIVATE_SOCKET)
    import docker

    try:
        client = docker.from_env()
    except docker.errors.DockerException as error:
        print(f"no Docker engine answers at {os.environ['DOCKER_HOST']} ({error}): run "
              "`bash scripts/docker_engine.sh start`, or set DOCKER_HOST to an engine's socket", file=sys.stderr)
        raise SystemExit(2) from None
    with TestCluster(client) as cluster, tempfile.TemporaryDirectory() as directory:
        os.environ["KUBECONFIG"] = str(cluster.write_kubeconfig(Path(directory) / "config"))
        cluster.hold_pods("torchx-ext/app-id")
        cluster.hold_pods("volcano.sh/job-name")  # torchx's own pods carry none of our labels
        results = {backend: (measure(cluster, 10, args.runs, backend), measure(cluster, args.replicas, args.runs, backend))
                   for backend in ("torchx", "job", "jobset", "volcano")}
    print(f"describe, median of {args.runs} (torchx: its builtin kubernetes scheduler's Volcano Job):")
    baseline_s = results["torchx"][1][0]
    for backend, ((small_s, small_requests), (large_s, large_requests)) in results.items():
        print(f"  {backend:>8}: {10:>5} replicas {small_s * 1000:7.1f} ms, {small_requests} requests; "
              f"{args.replicas:>5} replicas {large_s * 1000:7.1f} ms, {large_requests} requests "
              f"({large_s / baseline_s:.1f}x torchx)")
        if backend != "torchx":
            print(f"            target < {TARGET_S:.0f} s: {'met' if large_s < TARGET_S else 'NOT met'}; "
                  f"constant requests: {'met' if large_requests == small_requests else 'NOT met'}")


if __name__ == "__main__":
    main()

"""The kubernetes dry-run of a 1000-replica dist.ddp job: ours against torchx's builtin.

Builds the manifests of ``dist.ddp -j 1000x8 -h aws_p5.48xlarge`` (ours: a Service and one
Indexed Job whose pod template serves every replica; torchx's builtin kubernetes scheduler,
importable on both torchx lines: a Volcano Job with one task per replica) and prints the
median time of each, the ratio ours/torchx and the size of what each would send. Target: ours
under 200 ms. Exits 0 whether or not it is met.

    .venv/bin/python scripts/bench/k8s_manifests.py [--replicas 1000] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from torchx import specs

from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.common.app_ids import DNS_LABEL_IDS, new_app_id
from torchx_ext.schedulers.kubernetes.request import build_request
from torchx_ext.schedulers.kubernetes.options import ManifestOptions

TARGET_MS = 200.0


def ours(app: specs.AppDef) -> Any:
    return build_request(app, app_id=new_app_id(app.name, DNS_LABEL_IDS), options=ManifestOptions()).objects


def torchx_builtin(app: specs.AppDef) -> Any:
    from torchx.schedulers.kubernetes_scheduler import app_to_resource

    return app_to_resource(app, "default", service_account=None, priority_class=None)


def timed(build: Callable[[specs.AppDef], Any], app: specs.AppDef, runs: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        objects = build(app)
        times.append((time.perf_counter() - started) * 1000)
        size = len(json.dumps(objects, default=str))
    return statistics.median(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    app = ddp(script="train.py", j=f"{args.replicas}x8", h="aws_p5.48xlarge", image="registry.example/train:1")
    ours_ms, ours_size = timed(ours, app, args.runs)
    try:
        builtin_ms, builtin_size = timed(torchx_builtin, app, args.runs)
    except Exception as error:  # a torchx whose builtin changed shape: report ours alone
        print(f"torchx builtin: not measured ({type(error).__name__}: {error})")
        builtin_ms, builtin_size = float("nan"), 0
    print(f"{args.replicas} replicas, median of {args.runs}")
    print(f"ours:    {ours_ms:8.1f} ms, {ours_size:>10,} bytes of manifests")
    print(f"torchx:  {builtin_ms:8.1f} ms, {builtin_size:>10,} bytes of manifests")
    print(f"ratio ours/torchx: {ours_ms / builtin_ms:.5f}")
    print(f"target ours < {TARGET_MS:.0f} ms: {'met' if ours_ms < TARGET_MS else 'NOT met'}")


if __name__ == "__main__":
    main()

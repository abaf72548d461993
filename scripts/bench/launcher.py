"""Launcher overhead against torchrun, measured in the same run.

(a) binding cost per worker start: wall time of starting a Python worker through our bootstrap
    (plan decode + sched_setaffinity + runpy) minus starting the same empty script the way
    torchrun does (``python -u script``), alternating; target under 5 ms.
(b) a 2-process trivial gloo all-reduce job through ``python -m torchx_ext.launcher`` with
    ``--numa-binding exclusive`` against ``torchrun`` with the same arguments otherwise,
    alternating runs; prints medians and the ratio ours/torchrun (target at most 1.0).

    .venv/bin/python scripts/bench/launcher.py [--starts N] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from torchx_ext.launcher.bootstrap import BOOTSTRAP_CODE, WorkerBinding, encode_plan  # noqa: E402

JOB = str(HERE / "first_step_job.py")


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def alternate(first: list[str], second: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    timed(first, env)  # warm the page cache for both before measuring
    timed(second, env)
    for index in range(runs):
        # Alternate which goes first, so drift on the machine hits both alike.
        if index % 2 == 0:
            ours.append(timed(first, env))
            theirs.append(timed(second, env))
        else:
            theirs.append(timed(second, env))
            ours.append(timed(first, env))
    return ours, theirs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=40, help="worker starts per side for (a)")
    parser.add_argument("--jobs", type=int, default=8, help="jobs per side for (b)")
    args = parser.parse_args()
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}

    cpu = min(os.sched_getaffinity(0))
    plan = encode_plan([WorkerBinding(str(cpu), 0, None)])
    with tempfile.NamedTemporaryFile("w", suffix=".py") as empty:
        bootstrap = [sys.executable, "-u", "-c", BOOTSTRAP_CODE, plan, "0", "script", empty.name]
        plain = [sys.executable, "-u", empty.name]
        ours, theirs = alternate(bootstrap, plain, args.starts, env)
    cost_ms = (statistics.median(ours) - statistics.median(theirs)) * 1000
    print(f"(a) worker start, median of {args.starts}: bootstrap+binding {statistics.median(ours) * 1000:.1f} ms, "
          f"plain python {statistics.median(theirs) * 1000:.1f} ms -> binding cost {cost_ms:.1f} ms per worker "
          f"(target < 5 ms: {'met' if cost_ms < 5 else 'MISSED'})")

    common = ["--standalone", "--nproc-per-node", "2"]
    launcher = [sys.executable, "-m", "torchx_ext.launcher", *common, "--numa-binding", "exclusive", JOB]
    torchrun = [sys.executable, "-m", "torch.distributed.run", *common, JOB]
    ours, theirs = alternate(launcher, torchrun, args.jobs, env)
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"(b) 2-process all-reduce job, median of {args.jobs}: torchx_ext.launcher {statistics.median(ours):.2f} s, "
          f"torchrun {statistics.median(theirs):.2f} s -> ratio {ratio:.2f} (target <= 1.0: "
          f"{'met' if ratio <= 1.0 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

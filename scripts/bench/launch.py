"""End-to-end `torchx run -s local_cwd dist.ddp` wall time: ours against torchx 0.7.0's builtin.

Runs `torchx run -s local_cwd dist.ddp -j 1x2` and `-j 2x2` on a trivial gloo all-reduce
script, alternating ours (this checkout's .venv) with torchx 0.7.0's own component and
scheduler (a separate virtual environment, .venv-baseline, holding only torch, numpy and
torchx at the pins of requirements-test.txt; created on first use), and prints the medians
and the ratio ours/torchx. Targets on a 2-CPU machine: 1x2 at most 0.85, 2x2 at most 0.8.

    .venv/bin/python scripts/bench/launch.py [--runs N] [--jobs 1x2,2x2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torchx_ext.schedulers.local.records import STATE_ROOT_ENV

ROOT = Path(__file__).resolve().parents[2]
OURS = ROOT / ".venv"
BASELINE = ROOT / ".venv-baseline"
JOB = Path(__file__).resolve().parent / "trivial_allreduce.py"
TARGETS = {"1x2": 0.85, "2x2": 0.8}


def ensure_baseline() -> None:
    if (BASELINE / "bin" / "torchrun").exists() and (BASELINE / "bin" / "torchx").exists():
        return
    pins = [line.strip() for line in (ROOT / "requirements-test.txt").read_text().splitlines()
            if line.split("==")[0].strip() in ("torch", "torchx", "numpy")]
    print(f"creating {BASELINE} with {' '.join(pins)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(BASELINE)], check=True)
    subprocess.run([str(BASELINE / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", *pins], check=True)


def timed_run(venv: Path, job: str, workdir: Path, env: dict[str, str]) -> float:
    # Each side runs with its own environment's bin first on PATH, as an activated virtual
    # environment would (torchx's component calls `torchrun` from PATH).
    env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv)}
    command = [str(venv / "bin" / "torchx"), "run", "-s", "local_cwd", "dist.ddp", "-j", job, "--script", JOB.name]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({venv.name}):\n{result.stderr[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="runs of each side per job (default 7)")
    parser.add_argument("--jobs", default="1x2,2x2", help="comma-separated -j values (default 1x2,2x2)")
    args = parser.parse_args()
    ensure_baseline()
    with tempfile.TemporaryDirectory(prefix="torchx-ext-bench-") as scratch:
        workdir = Path(scratch)
        shutil.copy(JOB, workdir / JOB.name)
        env = {**os.environ, STATE_ROOT_ENV: str(workdir / "state"), "LOGLEVEL": "WARNING"}
        env.pop("PYTHONPATH", None)
        for job in args.jobs.split(","):
            timed_run(OURS, job, workdir, env)  # warm the page cache for both sides
            timed_run(BASELINE, job, workdir, env)
            ours, theirs = [], []
            for _ in range(args.runs):
                ours.append(timed_run(OURS, job, workdir, env))
                theirs.append(timed_run(BASELINE, job, workdir, env))
            ratio = statistics.median(ours) / statistics.median(theirs)
            target = TARGETS.get(job)
            verdict = "" if target is None else f"  target <= {target}: {'met' if ratio <= target else 'NOT met'}"
            print(
                f"-j {job}: ours median {statistics.median(ours):.2f} s, torchx 0.7.0 median "
                f"{statistics.median(theirs):.2f} s, ratio {ratio:.2f}{verdict}  ({args.runs} runs each)",
                flush=True,
            )


if __name__ == "__main__":
    main()

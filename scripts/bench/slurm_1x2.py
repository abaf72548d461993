"""``torchx run --wait dist.ddp -j 1x2`` end to end on Slurm: ours against torchx 0.7.0's own
slurm scheduler running torchx's own dist.ddp (torchrun), alternating, in the same invocation.

The baseline is the same CLI with torchx_ext's entry points hidden (``dryrun.py`` says how), so
torchx uses its builtin slurm scheduler and components, as without our package installed. Each
run is timed from the CLI's start to its exit, after the job SUCCEEDED. For ours it also prints
where the time went, from the job directory's records: CLI start to submission, submission to
the replica's start (Slurm's scheduling pass and launch), the replica's run (launcher, workers,
script), and its exit to the CLI's (Slurm's completion and the CLI's 1 s status poll). Needs a
Slurm cluster (``SLURM_CONF``; ``bash scripts/slurm_cluster.sh start`` gives the test one).
Target: ratio at most 0.6.

    .venv/bin/python scripts/bench/slurm_1x2.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from dryrun import WITH_PLUGIN, WITHOUT_PLUGIN  # type: ignore[import-not-found]  # noqa: E402

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"
TARGET = 0.6


PHASES = ("CLI to sbatch", "sbatch to replica start", "replica run", "replica exit to CLI exit")


def timed(code: str, scheduler_cfg: str, workdir: str) -> tuple[float, float]:
    """Seconds from the CLI's start to its exit, and the wall-clock time it started at."""
    args = ["run", "-s", "slurm", *(["-cfg", scheduler_cfg] if scheduler_cfg else []), "--wait", "dist.ddp",
            "-j", "1x2", "--script", str(TRAIN), "--", "--steps", "3"]
    # torchx's builtin runs `python` from PATH on the node: this interpreter's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    started_at = time.time()
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=workdir,
                            env=env, timeout=600)
    elapsed = time.perf_counter() - start
    if result.returncode != 0 or "SUCCEEDED" not in result.stdout + result.stderr:
        raise SystemExit(f"run failed ({'ours' if code == WITH_PLUGIN else 'torchx'}):\n"
                         f"{(result.stdout + result.stderr)[-3000:]}")
    return elapsed, started_at


def phases(job_dirs: Path, started_at: float, elapsed: float) -> list[float]:
    """Our run's phases (``PHASES``) from the newest job directory's records."""
    job = max(job_dirs.iterdir(), key=lambda path: path.stat().st_mtime)
    submitted = (job / "request.json").stat().st_mtime
    replica_start = json.loads((job / "train-0.started").read_text())["at"]
    replica_exit = json.loads((job / "train-0.exit").read_text())["at"]
    return [submitted - started_at, replica_start - submitted, replica_exit - replica_start,
            started_at + elapsed - replica_exit]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        print("no Slurm cluster answers (SLURM_CONF): start one with `bash scripts/slurm_cluster.sh start`",
              file=sys.stderr)
        return 2
    ours: list[float] = []
    theirs: list[float] = []
    our_phases: list[list[float]] = []
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.runs):
            elapsed, started_at = timed(WITH_PLUGIN, f"job_dir={workdir}/jobs", workdir)
            ours.append(elapsed)
            our_phases.append(phases(Path(workdir) / "jobs", started_at, elapsed))
            theirs.append(timed(WITHOUT_PLUGIN, "", workdir)[0])
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"torchx_ext slurm + dist.ddp: median {statistics.median(ours):.2f} s over {args.runs} runs "
          f"({', '.join(f'{value:.2f}' for value in ours)})")
    for name, values in zip(PHASES, zip(*our_phases)):
        print(f"  {name}: median {statistics.median(values):.2f} s")
    print(f"torchx 0.7.0 slurm + dist.ddp: median {statistics.median(theirs):.2f} s "
          f"({', '.join(f'{value:.2f}' for value in theirs)})")
    print(f"ratio {ratio:.2f} (target <= {TARGET}): {'met' if ratio <= TARGET else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

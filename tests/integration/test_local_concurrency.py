"""`torchx run -s local_cwd` started many times at the same moment: every job succeeds, no two
get the same rendezvous port (it is picked as each job starts, not at submission)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import TORCHX

JOB = Path(__file__).parent / "jobs" / "allreduce.py"
# As the issue asked: twelve single-node jobs; and four two-replica jobs in the same burst,
# whose replicas find each other through the port their supervisor picked.
SHAPES = ["1x2"] * 12 + ["2x1"] * 4


def test_sixteen_jobs_submitted_at_once_all_succeed(state_dir: Path) -> None:
    clis = [
        subprocess.Popen(
            [*TORCHX, "run", "-s", "local_cwd", "dist.ddp", "-j", shape, "--script", str(JOB)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        )
        for shape in SHAPES
    ]
    # 20 launchers and 32 workers on 2 CPUs: slow, not stuck.
    results = [cli.communicate(timeout=480) for cli in clis]

    failures = [
        f"exit {cli.returncode}: {out[-500:]} {err[-1500:]}"
        for cli, (out, err) in zip(clis, results)
        if cli.returncode != 0 or "SUCCEEDED" not in out + err
    ]
    assert failures == [], "\n\n".join(failures)

"""Running the launcher as a user does, and reading what the report.py workers wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

JOBS = Path(__file__).parent / "jobs"
REPORT = str(JOBS / "report.py")
LAUNCHER = [sys.executable, "-m", "torchx_ext.launcher"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("OMP_NUM_THREADS", "TORCH_MP_PARALLEL_START") and not key.startswith(("PET_", "TORCHELASTIC"))
    }
    env.update(extra)
    return env


def run_launcher(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    preexec_fn: Callable[[], Any] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCHER, *args],
        capture_output=True,
        text=True,
        env=env or clean_env(),
        timeout=timeout,
        preexec_fn=preexec_fn,
        cwd=cwd,
    )


def reports(out_dir: Path) -> list[dict[str, Any]]:
    files = sorted(out_dir.glob("rank*.json"))
    return [json.loads(path.read_text()) for path in files]


def worker_pids(out_dir: Path) -> list[int]:
    return [int(path.name.split(".")[1]) for path in out_dir.glob("pid*.*")]



def run_caller(
    directory: Path, source: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a user's own script (``directory/caller.py``) that calls the launcher
    in its process: whatever state the call leaves behind stays out of the test process."""
    script = directory / "caller.py"
    script.write_text(source)
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env or clean_env(), timeout=timeout
    )


def last_json_line(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.stdout.strip(), result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])

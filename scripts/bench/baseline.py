"""The benchmarks' two sides: this checkout's environment (.venv: torchx with torchx_ext) and
torchx's own (.venv-baseline: torch, numpy and torchx at requirements-test.txt's pins, nothing
of ours), which ``ensure_baseline`` creates on first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = ROOT / ".venv"
BASELINE = ROOT / ".venv-baseline"


def ensure_baseline() -> None:
    if (BASELINE / "bin" / "torchrun").exists() and (BASELINE / "bin" / "torchx").exists():
        return
    pins = [line.strip() for line in (ROOT / "requirements-test.txt").read_text().splitlines()
            if line.split("==")[0].strip() in ("torch", "torchx", "numpy")]
    print(f"creating {BASELINE} with {' '.join(pins)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(BASELINE)], check=True)
    subprocess.run([str(BASELINE / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", *pins], check=True)

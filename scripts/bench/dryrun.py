"""``torchx run --dryrun ... dist.ddp`` with our components against torchx 0.7.0's own.

Both run the torchx CLI in a fresh interpreter, alternating, in the same invocation. The
baseline is the same CLI with torchx_ext's entry points hidden (so torchx discovers and uses
its own builtin dist.ddp, as without our package installed). Target: ratio at most 1.0.

    .venv/bin/python scripts/bench/dryrun.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

# A script that exists: dist.ddp checks it before the dry run (torchx's own does not).
TRAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "train.py")
ARGS = ["run", "--dryrun", "-s", "local_cwd", "dist.ddp", "-j", "2x2", "--script", TRAIN]
WITHOUT_PLUGIN = """
import importlib_metadata as metadata, sys  # what torchx 0.7.0 reads entry points with
real = metadata.entry_points
def theirs(found):
    return metadata.EntryPoints(
        # torchx_ext and the per-line distributions it publishes (torchx-ext-for-torchx-0.7.0)
        ep for ep in found if not (ep.dist and ep.dist.name.replace("-", "_").startswith("torchx_ext"))
    )
class WithoutPlugin:
    def __init__(self, found):
        self.found = found
    def select(self, **selection):
        return theirs(self.found.select(**selection))
def entry_points(**selection):
    return theirs(real(**selection)) if selection else WithoutPlugin(real())
metadata.entry_points = entry_points
from torchx.cli.main import main
sys.argv = ["torchx", *sys.argv[1:]]
main()
"""
WITH_PLUGIN = "import sys; from torchx.cli.main import main; sys.argv = ['torchx', *sys.argv[1:]]; main()"


def timed(code: str) -> float:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, *ARGS], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(result.stderr[-2000:])
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=12)
    args = parser.parse_args()
    probe = subprocess.run([sys.executable, "-c", WITH_PLUGIN, *ARGS], capture_output=True, text=True)
    base = subprocess.run([sys.executable, "-c", WITHOUT_PLUGIN, *ARGS], capture_output=True, text=True)
    assert "torchx_ext.launcher" in probe.stdout and "torchrun" in base.stdout, (
        f"wrong components measured: {probe.stderr[-500:]} {base.stderr[-500:]}")
    ours: list[float] = []
    theirs: list[float] = []
    for index in range(args.runs):
        pair = [(ours, WITH_PLUGIN), (theirs, WITHOUT_PLUGIN)]
        for samples, code in pair if index % 2 == 0 else reversed(pair):
            samples.append(timed(code))
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(
        f"torchx run --dryrun dist.ddp, median of {args.runs}: torchx_ext {statistics.median(ours) * 1000:.0f} ms, "
        f"torchx 0.7.0 builtin {statistics.median(theirs) * 1000:.0f} ms -> ratio {ratio:.2f} "
        f"(target <= 1.0: {'met' if ratio <= 1.0 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    os.environ.pop("OMP_NUM_THREADS", None)
    sys.exit(main())

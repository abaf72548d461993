"""What a slurm workspace costs each submission: copying a workspace of 10,000 files and 200 MB into
the job's directory, ours next to torchx's own slurm copy (``DirWorkspaceMixin``, which copies when
``-cfg job_dir`` is given), measured in the same run on the same tree.

Target: no slower than torchx's copy (ratio <= 1.0). The tree: 9,900 files of 1 kB in 100
directories and 100 files of 2 MB (random bytes, so no filesystem can share blocks).

    .venv/bin/python scripts/bench/workspace_copy.py [--repeats N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from torchx_ext.schedulers.slurm.workspace import LARGE_BYTES, LARGE_FILES, copy_workspace  # noqa: E402

SMALL, SMALL_BYTES, LARGE, LARGE_FILE_BYTES = 9_900, 1_000, 100, 2_000_000


def make_tree(root: Path) -> None:
    for index in range(SMALL):
        directory = root / f"pkg{index % 100}"
        directory.mkdir(exist_ok=True)
        (directory / f"m{index}.py").write_bytes(os.urandom(SMALL_BYTES))
    (root / "weights").mkdir()
    for index in range(LARGE):
        (root / "weights" / f"w{index}.bin").write_bytes(os.urandom(LARGE_FILE_BYTES))


def ours(source: Path, target: Path) -> float:
    copied = copy_workspace(source, target / "workspace", target / "elsewhere")
    assert copied.files == SMALL + LARGE, copied
    return copied.seconds


def torchx_copy(source: Path, target: Path) -> float:
    from torchx.specs import Role
    from torchx.workspace.dir_workspace import DirWorkspaceMixin

    started = time.monotonic()
    DirWorkspaceMixin().build_workspace_and_update_role(Role("r", "img"), f"file://{source}", {"job_dir": str(target / "job")})
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to make the trees (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        source = Path(scratch) / "workspace"
        source.mkdir()
        make_tree(source)
        times: dict[str, list[float]] = {"ours": [], "torchx": []}
        for repeat in range(args.repeats):
            for name, copy in (("torchx", torchx_copy), ("ours", ours)):
                target = Path(scratch) / f"{name}-{repeat}"
                target.mkdir()
                os.sync()
                times[name].append(copy(source, target))
                shutil.rmtree(target)
    median = {name: statistics.median(values) for name, values in times.items()}
    ratio = median["ours"] / median["torchx"]
    print(f"workspace of {SMALL + LARGE:,} files, {(SMALL * SMALL_BYTES + LARGE * LARGE_FILE_BYTES) / 1e6:.0f} MB; "
          f"median of {args.repeats}")
    print(f"  ours   {median['ours']:.2f} s   (runs: {', '.join(f'{value:.2f}' for value in times['ours'])})")
    print(f"  torchx {median['torchx']:.2f} s   (runs: {', '.join(f'{value:.2f}' for value in times['torchx'])})")
    print(f"  ratio ours/torchx {ratio:.2f} (target <= 1.0: {'met' if ratio <= 1.0 else 'missed'})")
    print(f"  a workspace over {LARGE_FILES:,} files or {LARGE_BYTES / 1e6:.0f} MB gets a line saying what to exclude")


if __name__ == "__main__":
    main()

"""The launcher takes what torchrun takes: --nproc-per-node names (a registered accelerator
backend included), --redirects/--tee, and refuses the rest in one line with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.launcher_helpers import REPORT, reports, run_caller, run_launcher, worker_pids

# A user's script whose torch has an accelerator plugin ("fakeaccel", two devices) registered
# through torch's backend-registration API, then runs the launcher in its process.
WITH_ACCELERATOR_PLUGIN = '''
import sys
import types

import torch

from torchx_ext.launcher.cli import main

if __name__ == "__main__":
    torch.utils.rename_privateuse1_backend("fakeaccel")
    plugin = types.ModuleType("fakeaccel")
    plugin.is_available = lambda: True
    plugin.device_count = lambda: 2
    torch._register_device_module("fakeaccel", plugin)
    sys.exit(main(sys.argv[1:]))
'''


def test_nproc_per_node_names_a_registered_accelerator_backend(tmp_path: Path) -> None:
    result = run_caller(tmp_path, WITH_ACCELERATOR_PLUGIN, "--nproc-per-node", "fakeaccel", REPORT, str(tmp_path))

    assert result.returncode == 0, result.stderr[-3000:]
    assert [rank["sum"] for rank in reports(tmp_path)] == [3.0, 3.0]  # one worker per device


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", ""),
        ("abc", " (Unsupported nproc_per_node value: abc)"),  # torch's reason, as torch 2.13 words it
        ("privateuseone", " (no accelerator backend is registered under that name)"),
    ],
)
def test_a_bad_nproc_per_node_gets_one_line_and_exit_2(value: str, why: str, tmp_path: Path) -> None:
    result = run_launcher(["--nproc-per-node", value, REPORT, str(tmp_path)], timeout=60)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: invalid --nproc-per-node {value!r}{why}: expected a positive integer, auto, cpu, gpu, xpu, "
        "or the name of a registered accelerator backend"
    ]
    assert worker_pids(tmp_path) == []


def test_redirected_worker_output_lands_in_log_dir(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint(f\"rank {os.environ['RANK']} reports\")\n")
    result = run_launcher(["--nproc-per-node", "2", "--log-dir", str(logs), "--redirects", "0:1", str(script)])

    assert result.returncode == 0, result.stderr[-3000:]
    (rank0,) = logs.glob("*/attempt_0/0/stdout.log")
    assert "rank 0 reports" in rank0.read_text()
    assert "rank 0 reports" not in result.stdout and "rank 1 reports" in result.stdout


def test_a_bad_redirects_value_gets_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_launcher(["--redirects", "9", REPORT, str(tmp_path)], timeout=60)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: invalid --redirects '9': expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), "
        "or one of these per local rank such as 0:1,1:2"
    ]

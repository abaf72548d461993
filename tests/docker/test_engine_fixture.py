"""The test engine and image the Docker tests run on, and that CI never skips them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fixtures.docker_engine import TestImage


def test_the_test_image_runs_this_environment_pinned_to_a_cpu(docker_client: Any, test_image: TestImage) -> None:
    output = docker_client.containers.run(
        test_image.name, ["python", "-c", "import os, torch, torchx_ext; print(sorted(os.sched_getaffinity(0)))"],
        volumes=test_image.volumes, init=True, cpuset_cpus="0", remove=True,
    )

    assert output.decode().strip() == "[0]"


def test_without_an_engine_docker_tests_skip_but_fail_under_ci(tmp_path: Path) -> None:
    def run(ci: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock", "CI": ci}
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"{__file__}::test_the_test_image_runs_this_environment_pinned_to_a_cpu"],
            capture_output=True, text=True, env=env, timeout=120, cwd=Path(__file__).parents[2],
        )

    laptop, ci = run("false"), run("true")

    assert laptop.returncode == 0 and "1 skipped" in laptop.stdout, laptop.stdout
    assert ci.returncode == 1 and "CI=true: no Docker engine answers at" in ci.stdout, ci.stdout

"""The launcher's --tee output read through a slow pipe, as a container engine's log driver reads it."""

from __future__ import annotations

import re
import select
import subprocess
import time
from collections import Counter
from pathlib import Path

from tests.integration.launcher_helpers import LAUNCHER, clean_env

LINES_JOB = Path(__file__).parents[1] / "conformance" / "jobs" / "lines.py"
LINES_PER_RANK = 30_000


def buffered_env() -> dict[str, str]:
    # As in a container: Python's own buffering, whatever this shell says.
    env = clean_env()
    env.pop("PYTHONUNBUFFERED", None)
    return env


def test_tee_through_a_slow_pipe_keeps_every_line_whole_and_once() -> None:
    process = subprocess.Popen(
        [*LAUNCHER, "--nproc-per-node", "2", "--tee", "3", "--role", "", "--rdzv-endpoint", "localhost:0", str(LINES_JOB),
         str(LINES_PER_RANK)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=buffered_env(),
    )
    assert process.stdout is not None
    chunks = []
    # A reader slower than the writers keeps the pipe full, so that the tee threads' writes
    # block (and overlap) as they do when dockerd's log driver is the reader.
    while chunk := process.stdout.read(16384):
        chunks.append(chunk)
        time.sleep(0.0005)
    assert process.wait(timeout=120) == 0
    text = b"".join(chunks).decode(errors="replace")

    lines = text.splitlines()
    seen = Counter(line for line in lines if re.fullmatch(r"\[[01]\]:rank [01] line \d+", line))
    strays = [line for line in lines if line not in seen and not line.startswith("[torchx_ext.launcher]")]
    assert strays == [], f"{len(strays)} mangled lines, e.g. {strays[:3]}"
    assert len(seen) == 2 * LINES_PER_RANK and set(seen.values()) == {1}


def test_a_teed_line_is_readable_before_the_worker_ends() -> None:
    process = subprocess.Popen(
        [*LAUNCHER, "--nproc-per-node", "1", "--tee", "3", "--role", "", "--rdzv-endpoint", "localhost:0",
         str(Path(__file__).parents[1] / "conformance" / "jobs" / "sleeper.py")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=buffered_env(),
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 60)
        assert ready, "nothing on the launcher's stdout within 60 s while its worker runs"
        first = process.stdout.readline()
        assert first.startswith(b"[0]:running rank 0"), first
    finally:
        process.terminate()
        process.wait(timeout=60)

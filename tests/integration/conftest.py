"""Fixtures for tests that submit local_cwd jobs of their own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from torchx.runner import Runner, get_runner


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local_cwd state directory of the test's own: its jobs are the only ones listed."""
    monkeypatch.setenv("TORCHX_EXT_LOCAL_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def runner(state_dir: Path) -> Iterator[Runner]:
    with get_runner() as runner:
        yield runner

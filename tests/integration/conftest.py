"""Every integration test gets a local_cwd state directory of its own: the jobs it submits
(through the ``runner`` fixture, ``torchx``, or a launcher) are the only ones it lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import STATE_ROOT_ENV


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "state"))
    return tmp_path / "state"

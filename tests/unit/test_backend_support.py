"""What each backend declares it supports (``Backend.supports`` and ``lacks`` in
torchx_ext/schedulers/backends.py) against what it does: its options, its refusals, the docs'
table and the tests that cover each feature on it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from torchx.schedulers import get_scheduler_factories
from torchx.schedulers.api import Stream
from torchx.workspace.api import WorkspaceMixin

from tests.conformance.cases import EVERY_CASE, backend_of, features_of
from tests.helpers import TORCHX
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.backends import BACKENDS, FEATURES, LOG_STREAMS, WORKSPACES, Backend

REPO = Path(__file__).resolve().parents[2]
PARITY = REPO / "docs" / "torchx-parity.md"
TABLE_BEGIN = "<!-- what each scheduler supports: written from torchx_ext/schedulers/backends.py -->"
TABLE_END = "<!-- end of what each scheduler supports -->"
SUITES = ["tests/conformance", "tests/docker", "tests/kubernetes", "tests/slurm", "tests/integration"]


def _scheduler(backend: Backend) -> object:
    return get_scheduler_factories()[backend.scheduler]("support")


def test_every_backend_says_of_every_feature_whether_it_supports_it_and_why_not() -> None:
    names = {feature.name for feature in FEATURES}
    for backend in BACKENDS:
        assert set(backend.supports) | set(backend.lacks) == names, backend.scheduler
        assert not set(backend.supports) & set(backend.lacks), backend.scheduler
        assert all(why.strip() for why in backend.lacks.values()), backend.scheduler


def test_a_feature_asked_for_by_an_option_is_an_option_exactly_where_it_is_supported() -> None:
    for backend in BACKENDS:
        options = {name for name, _ in _scheduler(backend).run_opts()}  # type: ignore[attr-defined]
        for feature in FEATURES:
            if feature.option is not None:
                assert (feature.option in options) == (feature.name in backend.supports), (backend.scheduler,
                                                                                          feature.name)


def test_workspaces_are_supported_exactly_by_the_schedulers_that_take_one() -> None:
    for backend in BACKENDS:
        assert isinstance(_scheduler(backend), WorkspaceMixin) == (WORKSPACES in backend.supports), backend.scheduler


@pytest.mark.parametrize("backend", [backend for backend in BACKENDS if LOG_STREAMS in backend.lacks],
                         ids=lambda backend: backend.scheduler)
def test_one_log_stream_alone_is_refused_saying_why_where_the_backend_lacks_it(backend: Backend) -> None:
    scheduler = _scheduler(backend)
    with pytest.raises(InvalidArgumentError) as refused:
        scheduler.log_iter("no-such-app", "trainer", streams=Stream.STDERR)  # type: ignore[attr-defined]
    assert str(refused.value) == f"streams='stderr': {backend.lacks[LOG_STREAMS]}; leave streams out (combined)"


@pytest.mark.parametrize("backend", [backend for backend in BACKENDS
                                     if any(feature.option and feature.name in backend.lacks for feature in FEATURES)],
                         ids=lambda backend: backend.scheduler)
def test_an_option_of_a_lacking_feature_is_refused_in_one_line_saying_why(backend: Backend, tmp_path: Path) -> None:
    lacked = [feature for feature in FEATURES if feature.option and feature.name in backend.lacks]
    cfg = ",".join(f"{feature.option}=1" for feature in lacked)
    (tmp_path / "train.py").write_text("print('never run')\n")
    ran = subprocess.run([*TORCHX, "run", "-s", backend.scheduler, "--dryrun", "--workspace", "", "-cfg", cfg,
                          "dist.ddp", "-j", "1x1", "--image", "unused", "--script", "train.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode != 0 and "Traceback" not in ran.stderr, ran.stdout + ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("torchx: error:")]
    assert len(errors) == 1, ran.stderr
    for feature in lacked:
        assert f"{feature.option}: {backend.lacks[feature.name]}" in errors[0], errors[0]
    assert "its options are" in errors[0]


def test_a_case_named_for_a_feature_runs_on_a_backend_that_supports_it() -> None:
    for case in EVERY_CASE:
        declared = next(backend for backend in BACKENDS if backend.scheduler == backend_of(case))
        assert features_of(case) <= set(declared.supports), case


def test_every_feature_a_backend_supports_is_covered_by_a_test_on_that_backend(tmp_path: Path) -> None:
    # Collected, not run: a suite that needs an engine is skipped on a laptop and runs when CI=true.
    out = tmp_path / "covered.json"
    env = {**os.environ, "FEATURE_COVERAGE_OUT": str(out)}
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "-p", "tests.fixtures.feature_coverage", *SUITES],
                               cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    covered = {(feature, scheduler) for feature, scheduler, _ in json.loads(out.read_text())}
    declared = {(feature, backend.scheduler) for backend in BACKENDS for feature in backend.supports}
    assert declared - covered == set(), "declared, but no test covers it: mark one @pytest.mark.feature"


def support_table() -> str:
    """The docs' table, as the declarations say."""
    rows = [f"| feature | {' | '.join(backend.scheduler for backend in BACKENDS)} |",
            f"| --- |{' --- |' * len(BACKENDS)}"]
    for feature in FEATURES:
        cells = []
        for backend in BACKENDS:
            if feature.name in backend.supports:
                cells.append(f"yes, {backend.supports[feature.name]}" if backend.supports[feature.name] else "yes")
            else:
                cells.append(f"no: {backend.lacks[feature.name]}")
        rows.append(f"| {feature.meaning} | {' | '.join(cells)} |")
    return "\n".join(rows)


def test_the_docs_table_of_what_each_scheduler_supports_is_the_declarations() -> None:
    text = PARITY.read_text()
    block = f"{TABLE_BEGIN}\n{support_table()}\n{TABLE_END}"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        PARITY.write_text(re.sub(re.escape(TABLE_BEGIN) + ".*?" + re.escape(TABLE_END), lambda _: block, text,
                                 flags=re.DOTALL))
        text = PARITY.read_text()
    assert block in text, f"docs/torchx-parity.md should hold (UPDATE_GOLDEN=1 writes it):\n{block}"

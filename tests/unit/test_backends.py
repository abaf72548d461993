"""The backend list (torchx_ext/schedulers/backends.py) against the packages on disk: every
backend package is listed, and each has the modules every backend has, under the same names."""

from __future__ import annotations

import importlib
from pathlib import Path

from torchx_ext.schedulers.backends import BACKENDS

SCHEDULERS_DIR = Path(__file__).resolve().parents[2] / "torchx_ext" / "schedulers"
SHARED = {"common", "images"}
EVERY_BACKEND_HAS = {"options.py", "request.py", "scheduler.py"}


def test_every_backend_package_on_disk_is_listed_once() -> None:
    on_disk = {path.name for path in SCHEDULERS_DIR.iterdir() if (path / "__init__.py").is_file()} - SHARED
    listed = [backend.package for backend in BACKENDS]
    assert sorted(listed) == sorted(on_disk)
    assert len({backend.scheduler for backend in BACKENDS}) == len(BACKENDS)


def test_each_backend_has_the_modules_every_backend_has_and_a_factory() -> None:
    for backend in BACKENDS:
        files = {path.name for path in (SCHEDULERS_DIR / backend.package).glob("*.py")}
        assert EVERY_BACKEND_HAS <= files, (backend.scheduler, sorted(EVERY_BACKEND_HAS - files))
        module_name, _, factory = backend.factory.partition(":")
        assert callable(getattr(importlib.import_module(module_name), factory)), backend.factory

"""The cases the conformance and fault suites run on: every backend of
``torchx_ext/schedulers/backends.py`` once, and kubernetes once more for each ``-cfg backend``
beyond its default. A new backend is a new case here by itself; how the suite runs it (its
engine, how it loses a replica) is its branch of the ``scheduler`` fixture in conftest.py."""

from __future__ import annotations

from torchx_ext.schedulers.backends import SCHEDULERS

VARIANTS = {"local_cwd": ["local_cwd-warm"], "kubernetes": ["kubernetes-jobset", "kubernetes-volcano"],
            "slurm": ["slurm-allocation", "slurm-allocation-warm"]}
"""A backend's cases beyond its default options (local_cwd: forked by the warm interpreter,
``-cfg warm``; kubernetes: ``-cfg backend``; slurm: the steps of an allocation held for the test,
``-cfg allocation``, and there, launchers forked by its warm interpreters), each run after it."""
EVERY_CASE = [case for name in SCHEDULERS for case in [name, *VARIANTS.get(name, [])]]
EVERY_BACKEND = list(SCHEDULERS)
"""One case per backend, each with its default options."""
NO_ROOM_FOR_A_SPARE = {"slurm": "the test cluster's two nodes: tests/slurm/test_spares.py runs its own three"}

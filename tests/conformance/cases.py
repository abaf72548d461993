"""The cases the conformance and fault suites run on: every backend of
``torchx_ext/schedulers/backends.py`` once, and kubernetes once more for each ``-cfg backend``
beyond its default. A new backend is a new case here by itself; how the suite runs it (its
engine, how it loses a replica) is its branch of the ``scheduler`` fixture in conftest.py.

A test of a feature (``backends.FEATURES``) runs on the cases ``supporting`` it, as each backend's
declaration says, and is marked ``@pytest.mark.feature(NAME)`` (a backend's own suite:
``feature(NAME, backend=SCHEDULER)``); a case named for a feature (``local_cwd-warm``) covers it
with every test it runs. tests/unit/test_backend_support.py fails when a backend declares a
feature that no test covers on it."""

from __future__ import annotations

from torchx_ext.schedulers.backends import BACKENDS, FEATURES, SCHEDULERS

VARIANTS = {"local_cwd": ["local_cwd-warm"], "kubernetes": ["kubernetes-jobset", "kubernetes-volcano"],
            "slurm": ["slurm-allocation", "slurm-allocation-warm"]}
"""A backend's cases beyond its default options (local_cwd: forked by the warm interpreter,
``-cfg warm``; kubernetes: ``-cfg backend``; slurm: the steps of an allocation held for the test,
``-cfg allocation``, and there, launchers forked by its warm interpreters), each run after it."""
EVERY_CASE = [case for name in SCHEDULERS for case in [name, *VARIANTS.get(name, [])]]
EVERY_BACKEND = list(SCHEDULERS)
"""One case per backend, each with its default options."""
NO_ROOM_FOR_A_SPARE = {"slurm": "the test cluster's two nodes: tests/slurm/test_spares.py runs its own three"}
NO_ROOM_FOR_A_LIGHTHOUSE = {"slurm": "a torchft job's three roles are three components of a heterogeneous job, which "
                                     "take a node each: tests/slurm/test_torchft.py runs a cluster of three"}


def supporting(feature: str) -> list[str]:
    """The default case of each backend that supports ``feature``, as its ``Backend`` declares."""
    return [backend.scheduler for backend in BACKENDS if feature in backend.supports]


def backend_of(case: str) -> str:
    """The scheduler a case runs on: ``kubernetes-jobset`` runs on kubernetes."""
    return case.partition("-")[0]


def features_of(case: str) -> set[str]:
    """The features a case is named for: ``slurm-allocation-warm`` runs every test in an allocation, warm."""
    names = {feature.name for feature in FEATURES}
    return {part for part in case.split("-")[1:] if part in names}

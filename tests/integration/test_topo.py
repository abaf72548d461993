"""``torchx topo``'s plans: the launcher's, made without touching topo's own affinity or files."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.fixtures.fake_sysfs import write_sysfs
from torchx_ext.cli.topo import describe
from torchx_ext.launcher.worker_binding import plan_workers
from torchx_ext.numa.bind import bound_thread
from torchx_ext.resources import HOSTS


def replicas(document: dict[str, object]) -> list[dict[str, object]]:
    found = document["replicas"]
    assert isinstance(found, list)
    return found


def test_topo_never_changes_its_own_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int, cpus: Iterable[int]) -> None:
        raise AssertionError(f"torchx topo set an affinity: {pid} -> {sorted(cpus)}")

    before = os.sched_getaffinity(0)
    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    for j, host in [("2x1", None), ("3x2", None), ("1x8", "dgx_h100")]:
        describe(j, "exclusive", host)
    assert os.sched_getaffinity(0) == before


def test_each_slice_is_planned_as_a_launcher_bound_to_it_plans(two_cpus: list[int]) -> None:
    document, _ = describe("2x1", "exclusive", None)
    for replica in replicas(document):
        slice_cpus = replica["slice_cpus"]
        assert isinstance(slice_cpus, list)
        with bound_thread(slice_cpus):  # what local_cwd's replica launcher runs under
            plan, _ = plan_workers(1, "exclusive")
        assert replica["ranks"] == plan.to_json()["ranks"]


def test_a_named_host_is_planned_as_its_sysfs_tree_would_be(tmp_path: Path) -> None:
    document, text = describe("1x8", "exclusive", "dgx_h100")
    root = write_sysfs(HOSTS["dgx_h100"].machine, tmp_path)
    plan, _ = plan_workers(8, "exclusive", sysfs_root=str(root), dry_run=True, env={})
    assert replicas(document)[0]["ranks"] == plan.to_json()["ranks"]
    assert text.startswith("sysfs root: none (named resource dgx_h100, described)\n")

"""What the launcher hands torch.distributed.elastic, checked before anything starts."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from torchx_ext.errors import BindingFallbackError
from torchx_ext.launcher.bootstrap import (
    BOOTSTRAP_CODE,
    BoundCallable,
    WorkerBinding,
    decode_plan,
    encode_plan,
    run_preloaded,
)
from torchx_ext.launcher.cli import build_parser, prepare
from torchx_ext.numa.cpulist import format_cpulist


@pytest.fixture(autouse=True)
def no_omp_export(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_torchs_own_numa_binding_is_off_and_ours_is_in_the_worker_command(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    args = build_parser().parse_args(
        ["--nproc_per_node", "2", "--numa_binding", "exclusive", "--omp_threads", "auto", "--worker-start", "fresh",
         str(script), "a$b"]
    )
    config, entrypoint, entry_args = prepare(args)
    assert config.numa_options is None  # applied once: by us, not also by torch
    assert config.nproc_per_node == 2 and config.shutdown_timeout == 5
    assert entry_args[:3] == ["-u", "-c", BOOTSTRAP_CODE]
    plan, local_rank, kind, target, *rest = entry_args[3:]
    assert (local_rank, kind, target, rest) == ("${local_rank}", "script", str(script), ["a$$b"])
    bindings = decode_plan(plan)
    assert len(bindings) == 2 and all(binding.cpus for binding in bindings)
    assert all(binding.omp_threads is not None for binding in bindings)
    assert "OMP_NUM_THREADS" not in os.environ  # our choice, per rank; not torchrun's global 1


def test_preloaded_workers_are_a_bound_callable_forked_from_the_forkserver(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    args = build_parser().parse_args(["--nproc_per_node", "2", "--numa_binding", "exclusive", str(script), "a$b"])

    config, entrypoint, entry_args = prepare(args)

    assert config.start_method == "forkserver"
    assert isinstance(entrypoint, BoundCallable) and entry_args == ["${local_rank}"]
    assert len(decode_plan(entrypoint.plan)) == 2
    fn, fn_args = pickle.loads(entrypoint.payload or b"")
    assert fn is run_preloaded and fn_args == ("script", str(script), "a$b")  # pickled: not escaped


def test_plan_encoding_round_trips_without_dollar_signs() -> None:
    bindings = [WorkerBinding("0-13,112-125", 0, 14), WorkerBinding(None, None, None), WorkerBinding("7", 3, None)]
    text = encode_plan(bindings)
    assert "$" not in text and decode_plan(text) == bindings


def test_rendezvous_host_comes_from_the_named_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    parser = build_parser()
    monkeypatch.setenv("MY_MASTER", "10.1.2.3")
    args = ["--nnodes", "2", "--rdzv_endpoint_env", "MY_MASTER", "--rdzv_port", "29555", str(script)]
    assert prepare(parser.parse_args(args))[0].rdzv_endpoint == "10.1.2.3:29555"
    monkeypatch.setenv("MY_MASTER", "")
    assert prepare(parser.parse_args(args))[0].rdzv_endpoint == "localhost:29555"


@pytest.fixture
def two_xpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """This torch sees two XPU devices: its own device query says so (no XPU here)."""
    import torch

    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 2)


def prepare_xpu_job(mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> tuple[Any, list[Any]]:
    """prepare() of a 2-xpu `--nproc-per-node xpu` job in ``mode``: its config and bindings."""
    script = tmp_path / "train.py"
    script.write_text("")
    args = build_parser().parse_args(["--nproc-per-node", "xpu", "--numa-binding", mode, str(script)])
    with caplog.at_level(logging.WARNING, logger="torchx_ext"):
        config, entrypoint, _ = prepare(args)
    assert isinstance(entrypoint, BoundCallable)
    return config, list(decode_plan(entrypoint.plan))


def test_nproc_per_node_xpu_starts_one_rank_per_xpu_planned_as_cpu_shares(
    two_xpus: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, bindings = prepare_xpu_job("exclusive", tmp_path, caplog)

    assert config.nproc_per_node == 2
    assert len(bindings) == 2 and all(binding.cpus for binding in bindings)
    # Said out loud: these ranks get CPU shares, not the CPUs nearest their device.
    assert "ranks drive xpu devices, whose NUMA nodes are unknown here" in caplog.text


def test_xpu_ranks_under_auto_binding_are_left_unbound(
    two_xpus: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, bindings = prepare_xpu_job("auto", tmp_path, caplog)

    assert config.nproc_per_node == 2
    mine = format_cpulist(sorted(os.sched_getaffinity(0)))
    assert [binding.cpus for binding in bindings] == [mine, mine]
    assert "NUMA binding off: --nproc-per-node xpu ranks drive xpu devices" in caplog.text


def test_strict_binding_of_xpu_ranks_is_refused_unless_planned_as_cpu(two_xpus: None, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    strict = ["--nproc-per-node", "xpu", "--numa-binding", "node", "--numa-strict", str(script)]

    with pytest.raises(BindingFallbackError, match="pass --numa-device-kind cpu"):
        prepare(build_parser().parse_args(strict))
    config, _, _ = prepare(build_parser().parse_args(["--numa-device-kind", "cpu", *strict]))
    assert config.nproc_per_node == 2

"""The torchx CLI with torchx_ext installed, as a user types it."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from torchx.schedulers import DEFAULT_SCHEDULER_MODULES
from torchx.specs.finder import ModuleComponentsFinder

from tests.integration.launcher_helpers import JOBS, clean_env
from torchx_ext.registration.lines import require_torchx
from torchx_ext.schedulers.backends import BACKENDS, SCHEDULERS

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LINE = require_torchx()
# The schedulers the installed torchx itself ships (its own table), each still offered.
TORCHX_BUILTIN_SCHEDULERS = list(DEFAULT_SCHEDULER_MODULES)
# Scheduler options each needs for a dry run; all the client libraries they need are installed.
# Only those the installed torchx has are tried (nightly has no lsf, kubernetes_mcad, aws_batch).
# Ours (every backend of torchx_ext/schedulers/backends.py), then some of torchx's own.
DRYRUN_CFG = {"kubernetes": ["-cfg", "namespace=default"], "kubernetes_mcad": ["-cfg", "namespace=default"],
              "aws_batch": ["-cfg", "queue=default"]}
DRYRUN_SCHEDULERS = {name: DRYRUN_CFG.get(name, []) for name in [*SCHEDULERS, "lsf", "kubernetes_mcad", "aws_batch"]
                     if name in TORCHX_BUILTIN_SCHEDULERS}


def torchx(*args: str, timeout: float = 180, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed torchx CLI of this test run's environment, with its bin first on PATH."""
    env = clean_env(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {}))
    return subprocess.run(
        [str(BIN / "torchx"), *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
    )


def torchx_own_components() -> list[str]:
    """What `torchx builtins` lists without torchx_ext: torchx's components package, searched as
    torchx does when no components are registered."""
    finder = ModuleComponentsFinder("torchx.components", "")
    # nightly's find() takes the CLI's validators (None); 0.7.0's takes nothing.
    found = finder.find(*([None] if "validators" in inspect.signature(finder.find).parameters else []))
    return sorted(component.name for component in found if not component.validation_errors)


def test_builtins_lists_our_components_and_torchx_others() -> None:
    listing = torchx("builtins").stdout
    own = torchx_own_components()
    assert {"utils.echo", "utils.sh", "utils.python"} <= set(own), own  # the oracle found them
    for name in ["dist.ddp", "dist.spmd", *own]:
        assert re.search(rf"\b{re.escape(name)}\b", listing), (name, listing)
    assert "numa_binding" in torchx("builtins", "--print", "dist.ddp").stdout  # ours, not torchx's


def test_torchx_utils_components_still_run(tmp_path: Path) -> None:
    echo = torchx("run", "-s", "local_cwd", "utils.echo", "--msg", "hello from torchx")
    assert echo.returncode == 0 and re.search("job finished: SUCCEEDED", echo.stderr, re.IGNORECASE), echo.stderr
    touched = tmp_path / "touched"
    touch = torchx("run", "-s", "local_cwd", "utils.touch", "--file", str(touched))
    assert touch.returncode == 0, touch.stderr
    assert touched.exists()


def offered_schedulers(env: dict[str, str] | None = None) -> list[str]:
    """The schedulers `torchx run -s` accepts, in its order (the first is the default)."""
    refused = torchx("run", "-s", "no_such_scheduler", "utils.echo", env=env)
    choices = re.search(r"invalid choice: 'no_such_scheduler' \(choose from (.*)\)", refused.stderr)
    assert choices is not None, refused.stderr
    return re.findall(r"'([a-z_]+)'", choices.group(1))


def test_exactly_the_installed_torchx_builtin_schedulers_are_offered_with_local_cwd_first() -> None:
    names = offered_schedulers()
    assert names[0] == "local_cwd"  # torchx run's default
    # Nothing this torchx lacks, but a backend of ours that takes no torchx name (torchx_builtin None).
    ours_only = [backend.scheduler for backend in BACKENDS if backend.torchx_builtin is None]
    assert sorted(names) == sorted({*TORCHX_BUILTIN_SCHEDULERS, *ours_only})
    assert set(SCHEDULERS) <= set(names)


def test_dryrun_on_each_scheduler_runs_our_launcher() -> None:
    for scheduler, cfg in DRYRUN_SCHEDULERS.items():
        result = torchx("run", "--workspace", "", "--dryrun", "-s", scheduler, *cfg,
                        "dist.ddp", "-j", "2x2", "--script", "examples/train.py", "--", "--lr", "0.1")
        assert result.returncode == 0, (scheduler, result.stderr[-2000:])
        out = result.stdout + result.stderr
        assert "torchx_ext.launcher" in out and "--rdzv-endpoint-env" in out, scheduler
        assert "bash -c" not in out, scheduler


def run_train(*args: str) -> tuple[str, dict[tuple[int, int], list[int]]]:
    """Runs examples/train.py through dist.ddp; returns the output and (replica, local rank) -> CPUs."""
    result = torchx("run", "-s", "local_cwd", "dist.ddp", *args, "--script", "examples/train.py", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    reported = {
        (int(group), int(local)): json.loads(cpus)
        for local, group, cpus in re.findall(r"rank \d+/\d+ \(local (\d+), replica (\d+)\): cpus=(\[[\d, ]*\])", out)
    }
    return out, reported


def test_main_job_four_ranks_bound_as_torchx_topo_says() -> None:
    out, reported = run_train("-j", "2x2")
    assert re.search(
        r"train\.py: 4 ranks finished 20 steps, .* all-reduce of ranks 1\.\.4 = 10 \(expected 10\), "
        r"weights in sync on every rank",
        out,
    ), out[-3000:]
    assert sorted(reported) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    plan = json.loads(torchx("topo", "-j", "2x2", "--json").stdout)
    for (replica, local), cpus in reported.items():
        assert cpus == plan["replicas"][replica]["ranks"][local]["cpus"]
    if len(os.sched_getaffinity(0)) >= 2:  # local_cwd gives each replica its own slice
        assert set(reported[(0, 0)]).isdisjoint(reported[(1, 0)])


def test_exclusive_job_binds_each_rank_where_torchx_topo_says(two_cpus: list[int]) -> None:
    out, reported = run_train("-j", "1x2", "--numa_binding", "exclusive")
    assert "all-reduce of ranks 1..2 = 3 (expected 3)" in out
    plan = json.loads(torchx("topo", "-j", "1x2", "--numa_binding", "exclusive", "--json").stdout)
    assert reported == {(0, local): plan["ranks"][local]["cpus"] for local in (0, 1)}
    assert reported[(0, 0)] != reported[(0, 1)]


weird_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=st.lists(st.one_of(weird_text, st.sampled_from(["$HOME", "$$", "${app_id}", "`id`", "$(id)", "-h", "--"])),
                     min_size=1, max_size=5))
def test_random_script_arguments_reach_every_worker_byte_for_byte(args: list[str]) -> None:
    # torchx 0.7.0's CLI itself refuses a dash-argument repeated between "--" separators.
    dashed = [arg for arg in args if arg.startswith("-") and arg.strip() not in ("-", "--")]
    assume(len(dashed) == len(set(dashed)))
    with tempfile.TemporaryDirectory() as out_dir:
        result = torchx("run", "-s", "local_cwd", "dist.ddp", "-j", "1x2", "--script",
                        str(JOBS / "argv_job.py"), out_dir, *args)
        assert result.returncode == 0, result.stderr[-2000:]
        for rank in (0, 1):
            assert json.loads((Path(out_dir) / f"argv{rank}.json").read_text(encoding="utf-8")) == args


def test_bad_component_input_is_a_clear_error_and_starts_nothing() -> None:
    cases = [
        (["-h", "no_such_host", "--script", "t.py"], "unknown named resource -h 'no_such_host'"),
        (["-j", "1x", "--script", "t.py"], "invalid -j '1x'"),
        (["--script", "t.py", "-m", "mod"], "exactly one of --script SCRIPT and -m MODULE"),
        (["-j", "1x1"], "exactly one of --script SCRIPT and -m MODULE"),
        (["--numa_binding", "numa", "--script", "t.py"], "unknown --numa-binding 'numa'"),
        (["--mounts", "type=bind,src=/a", "--script", "t.py"], "malformed --mounts"),
        (["--env", "NOEQUALS", "--script", "t.py"], "NOEQUALS"),
    ]
    for args, message in cases:
        result = torchx("run", "-s", "local_cwd", "dist.ddp", *args)
        assert result.returncode != 0, args
        assert message in result.stdout + result.stderr, (args, (result.stdout + result.stderr)[-1500:])
        assert "Waiting for the app to finish" not in result.stderr, args
        if message != "NOEQUALS":  # torchx's own --env parsing, before our component runs
            assert "Traceback" not in result.stderr and "torchx: error: " in result.stderr, result.stderr

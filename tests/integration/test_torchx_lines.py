"""torchx_ext on each torchx line (0.7.0 and nightly): what this environment's torchx offers with
torchx_ext installed, as a user sees it through the real CLI.

scripts/test.sh runs the suite once per line and says which in TORCHX_EXT_LINE; each test that
differs by line checks the line it finds installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from tests.integration.test_torchx_plugin import BIN, LINE, offered_schedulers, torchx
from torchx_ext.registration.lines import NIGHTLY, RELEASE
from torchx_ext.registration.metadata import TORCHX_0_7_0, TORCHX_NIGHTLY

ON_NIGHTLY = LINE.distribution == NIGHTLY
nightly_only = pytest.mark.skipif(not ON_NIGHTLY, reason="torchx-nightly only (scripts/test.sh runs it on .venv-nightly)")
groups = ["torchx.schedulers", "torchx.named_resources", "torchx.components", "torchx.cli.cmds"]


def test_this_run_is_on_the_line_scripts_test_sh_meant() -> None:
    meant = os.environ.get("TORCHX_EXT_LINE")
    if meant is None:
        # CI runs the suite through scripts/test.sh, which names the line: there it must be set.
        assert os.environ.get("CI") != "true", "CI=true but TORCHX_EXT_LINE is unset: run scripts/test.sh"
        pytest.skip("not run by scripts/test.sh: no line was meant")
    assert LINE.name == meant, LINE


def test_pip_shows_exactly_one_torchx_distribution_the_line_installed() -> None:
    # pip's own view: installing torchx_ext next to torchx-nightly pulled no `torchx` over it.
    listed = subprocess.run([sys.executable, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True)
    names = {package["name"].lower(): package["version"] for package in json.loads(listed.stdout)}
    if ON_NIGHTLY:
        assert names.get(NIGHTLY) == "2026.10.26" and RELEASE not in names, names
    else:
        assert names.get(RELEASE) == "0.7.0" and NIGHTLY not in names, names
    assert "torchx-ext" in names or "torchx_ext" in names, names
    # The line's entry points are published as a distribution of no location: not pip's to list.
    assert TORCHX_0_7_0 not in names and TORCHX_NIGHTLY not in names, names


def test_every_registered_entry_point_names_a_module_that_exists() -> None:
    # Nothing registered that the installed torchx lacks (the bug on nightly: No module named
    # 'torchx.components.metrics'). Ours load; torchx's own are only looked up: some import
    # client libraries this environment lacks (boto3, ray), with or without torchx_ext.
    for group in groups:
        for entry_point in metadata.entry_points(group=group):
            assert importlib.util.find_spec(entry_point.module) is not None, (group, entry_point)
            if entry_point.module.startswith("torchx_ext."):
                assert entry_point.load() is not None, (group, entry_point)


def test_only_the_installed_lines_entry_points_are_published() -> None:
    names = {distribution.metadata["Name"] for distribution in metadata.distributions()}
    published, hidden = (TORCHX_NIGHTLY, TORCHX_0_7_0) if ON_NIGHTLY else (TORCHX_0_7_0, TORCHX_NIGHTLY)
    assert published in names and hidden not in names
    # ... by the finder the .pth file installs, which the package's install put in site-packages.
    assert (Path(sysconfig.get_paths()["purelib"]) / "torchx_ext_registration.pth").is_file()


@nightly_only
def test_nightly_offers_no_scheduler_it_lacks_and_refuses_one_as_torchx_does() -> None:
    result = torchx("run", "--dryrun", "-s", "aws_batch", "utils.echo")
    assert result.returncode == 2, result.stderr[-2000:]
    assert re.search(r"torchx run: error: argument -s/--scheduler: invalid choice: 'aws_batch' \(choose from 'local_cwd', ",
                     result.stderr), result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@nightly_only
def test_nightly_finds_our_plugins_in_its_own_namespace_with_entry_points_off() -> None:
    # TORCHX_PLUGINS_SOURCE=1: nightly reads torchx_plugins.* only, no entry points.
    off = {"TORCHX_PLUGINS_SOURCE": "1"}
    assert offered_schedulers(off)[0] == "local_cwd"
    dryrun = torchx("run", "--dryrun", "-s", "local_cwd", "dist.ddp", "-j", "1x2", "-h", "dgx_h100",
                    "--script", "examples/train.py", env=off)
    assert dryrun.returncode == 0, dryrun.stderr[-2000:]
    assert "torchx_ext.launcher" in dryrun.stdout + dryrun.stderr
    registry = subprocess.run(
        [sys.executable, "-c", "from torchx import plugins; print(plugins.registry().load_errors())"],
        capture_output=True, text=True, check=True,
    )
    assert registry.stdout.strip() == "[]", registry.stdout + registry.stderr


@pytest.mark.parametrize("scheduler", ["local_docker", "kubernetes"])
def test_torchx_own_schedulers_dry_run_its_components(scheduler: str) -> None:
    cfg = ["-cfg", "namespace=default"] if scheduler == "kubernetes" else []
    result = torchx("run", "--workspace", "", "--dryrun", "-s", scheduler, *cfg, "utils.echo", "--msg", "hi")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "echo" in result.stdout


def test_handle_commands_exit_with_the_documented_codes() -> None:
    # exit_codes: 2 input refused (malformed handle, unknown scheduler), 1 no such app.
    commands = ["status", "describe", "cancel", "log", "delete"]
    for command in commands:
        malformed = torchx(command, "not-a-handle", timeout=60)
        unknown_scheduler = torchx(command, "no_such_scheduler://torchx/app-1", timeout=60)
        unknown_app = torchx(command, "local_cwd://torchx/no-such-app-1234", timeout=60)
        assert malformed.returncode == 2, (command, malformed.stderr)
        assert "torchx: error: malformed app handle 'not-a-handle'" in malformed.stderr, (command, malformed.stderr)
        assert unknown_scheduler.returncode == 2, (command, unknown_scheduler.stderr)
        assert "unknown scheduler 'no_such_scheduler'" in unknown_scheduler.stderr, (command, unknown_scheduler.stderr)
        assert "local_cwd" in unknown_scheduler.stderr.splitlines()[-1]  # the valid ones are named
        assert unknown_app.returncode == 1, (command, unknown_app.stderr)
        assert "no app 'no-such-app-1234' on local_cwd" in unknown_app.stderr, (command, unknown_app.stderr)
        for result in (malformed, unknown_scheduler, unknown_app):
            assert "Traceback" not in result.stderr, (command, result.stderr)


def test_delete_is_offered_on_both_lines() -> None:
    # nightly's own command (handle checked), and on torchx 0.7.0, which has none, ours.
    usage = torchx("--help").stdout
    assert "delete" in re.findall(r"\b[a-z]+\b", usage.split("sub-commands")[1]), usage


def test_without_torchx_the_registration_says_what_to_install() -> None:
    # torchx hidden from the import system, as in an environment that has neither distribution.
    code = ("import sys; sys.modules['torchx'] = None\n"
            "from torchx_ext.registration.lines import require_torchx\n"
            "require_torchx()")
    result = subprocess.run([str(BIN / "python"), "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "pip install 'torchx_ext[torchx]'" in result.stderr and "torchx-nightly" in result.stderr, result.stderr

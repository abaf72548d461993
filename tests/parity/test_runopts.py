"""Every option of torchx's own four schedulers, on the torchx line installed, is accepted by ours
with torchx's type and default (unless docs/torchx-parity.md says otherwise) and listed there; a
dry run through the CLI with all of torchx's options at once shows what each became."""

from __future__ import annotations

import importlib
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from torchx.schedulers import get_scheduler_factories
from torchx.specs import runopts

from tests.helpers import torchx
from torchx_ext.schedulers.backends import BACKENDS

REPO = Path(__file__).resolve().parents[2]
PARITY = REPO / "docs" / "torchx-parity.md"
TORCHX_SCHEDULERS = {backend.scheduler: backend.torchx_builtin for backend in BACKENDS if backend.torchx_builtin}
# (scheduler, option): how ours differs on purpose, as docs/torchx-parity.md says.
DIFFERENT_DEFAULTS = {("kubernetes", "namespace"): "the kubeconfig context's namespace"}
NOT_REQUIRED = {("kubernetes", "queue"): "optional: Kueue or Volcano, by backend"}


def torchx_opts(scheduler: str) -> runopts:
    module = importlib.import_module(TORCHX_SCHEDULERS[scheduler])
    return module.create_scheduler("parity").run_opts()


def our_opts(scheduler: str) -> runopts:
    made = get_scheduler_factories()[scheduler]("parity")
    assert type(made).__module__.startswith("torchx_ext."), type(made)
    return made.run_opts()


def same_type(first: Any, second: Any) -> bool:
    # typing.List[str] and list[str] are the same option to torchx's parser.
    return (typing.get_origin(first) or first, typing.get_args(first)) == (
        typing.get_origin(second) or second, typing.get_args(second))


def documented(scheduler: str) -> dict[str, str]:
    """torchx's option -> the difference docs/torchx-parity.md gives for it under ``## scheduler``."""
    text = PARITY.read_text()
    start = text.index(f"\n## {scheduler}\n")
    end = text.find("\n## ", start + 1)
    rows = re.findall(r"^\| `([\w-]+)` \| `[\w-]+` \| (.*) \|$", text[start:end if end > 0 else None], re.MULTILINE)
    return dict(rows)


@pytest.mark.parametrize("scheduler", sorted(TORCHX_SCHEDULERS))
def test_every_torchx_option_is_ours_with_its_type_and_default_and_documented(scheduler: str) -> None:
    ours, docs = our_opts(scheduler), documented(scheduler)
    problems = []
    for name, theirs in torchx_opts(scheduler):
        mine = ours.get(name)
        if mine is None:
            problems.append(f"{name}: not an option of ours")
            continue
        if not same_type(mine.opt_type, theirs.opt_type):
            problems.append(f"{name}: type {mine.opt_type} (torchx: {theirs.opt_type})")
        if mine.default != theirs.default and (scheduler, name) not in DIFFERENT_DEFAULTS:
            problems.append(f"{name}: default {mine.default!r} (torchx: {theirs.default!r})")
        if mine.is_required != theirs.is_required and (scheduler, name) not in NOT_REQUIRED:
            problems.append(f"{name}: required {mine.is_required} (torchx: {theirs.is_required})")
        if name not in docs:
            problems.append(f"{name}: not in {PARITY.name}'s {scheduler} table")
    for name, why in {**DIFFERENT_DEFAULTS, **NOT_REQUIRED}.items():
        if name[0] == scheduler and name[1] in docs:
            assert docs[name[1]] != "same", (name, why)
    assert not problems, problems


def dry_run(scheduler: str, cfg: str, *component: str, cwd: Path = REPO) -> str:
    """The scheduler's request as the dry run prints it (not the AppDef printed before it)."""
    ran = torchx("run", "-s", scheduler, "--dryrun", "-cfg", cfg, "--workspace", "", *component, cwd=cwd)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout.split("=== SCHEDULER REQUEST ===", 1)[1]


def test_local_cwd_takes_torchx_options_and_splits_the_gpus_as_torchx_does(machine_root: Any, tmp_path: Path) -> None:
    shown = dry_run("local_cwd", f"log_dir={tmp_path},prepend_cwd=True,auto_set_cuda_visible_devices=True,"
                    f"sysfs_root={machine_root('dgx-h100')}",
                    "dist.ddp", "-j", "2x2", "--gpu", "3", "--script", "examples/train.py")

    assert re.findall(r"env CUDA_VISIBLE_DEVICES='([\d,]+)'", shown) == ["0,1,2", "3,4,5"]
    assert f"app_dir: {tmp_path}/" in shown


def test_kubernetes_takes_torchx_options_and_they_shape_the_pods() -> None:
    shown = dry_run("kubernetes", "namespace=team-a,queue=team-q,service_account=trainer,priority_class=high,"
                    "image_repo=registry.example/team/train,quiet=True,validate_spec=False,reserved_millicpu=500,"
                    "reserved_memmb=2048,efa_device_count=0",
                    "dist.ddp", "-j", "1x8", "-h", "aws_p5.48xlarge", "--image", "img:1", "--script", "main.py")

    assert "namespace: team-a" in shown and "kueue.x-k8s.io/queue-name: team-q" in shown
    assert "serviceAccountName: trainer" in shown and "priorityClassName: high" in shown
    assert "vpc.amazonaws.com/efa" not in shown  # efa_device_count=0 takes the named resource's EFA away
    assert re.search(r"cpu: '191'\n\s+memory: \d+Mi", shown)  # 192 CPUs less 500 millicores, whole CPUs


def test_slurm_takes_torchx_options_in_torchx_spelling(tmp_path: Path) -> None:
    shown = dry_run("slurm", f"partition=debug,time=10,comment=nightly run,constraint=x86,mail-user=me@example.com,"
                    f"mail-type=END,job_dir={tmp_path},account=ml,qos=high,workspace_type=dir,quiet=True",
                    "dist.ddp", "-j", "1x1", "--script", "examples/train.py")

    for line in ("--partition=debug", "--time=10", '--comment="nightly run"', "--constraint=x86",
                 "--mail-user=me@example.com", "--mail-type=END", "--account=ml", "--qos=high"):
        assert f"#SBATCH {line}\n" in shown, line


def test_slurm_refuses_the_docker_workspace_type_in_one_line_naming_dir(tmp_path: Path) -> None:
    ran = torchx("run", "-s", "slurm", "--dryrun", "-cfg", f"workspace_type=docker,job_dir={tmp_path}", "dist.ddp",
                 "-j", "1x1", "--script", "examples/train.py", cwd=REPO)

    errors = [line for line in ran.stderr.splitlines() if line.startswith("torchx: error:")]
    assert ran.returncode != 0 and "Traceback" not in ran.stderr, ran.stderr
    assert len(errors) == 1 and "workspace_type=docker" in errors[0] and "use workspace_type=dir" in errors[0]


def test_local_docker_takes_torchx_options(tmp_path: Path) -> None:
    shown = dry_run("local_docker", "copy_env=HOME,env=GREETING:hello,privileged=False,image_repo=unused/x,quiet=True",
                    "dist.ddp", "-j", "1x1", "--image", "img:1", "--script", "main.py")

    assert "GREETING" in shown and "hello" in shown

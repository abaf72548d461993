"""What a slurm workspace copy takes (real files): ``.torchxignore`` only, links as links, modes kept,
never the job directories themselves; a large workspace is told what to exclude."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from torchx.specs import Role

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.slurm.workspace import LARGE_FILES, copy_workspace, workspace_of


def test_the_copy_follows_torchxignore_keeps_links_and_modes_and_leaves_the_job_dirs_out(tmp_path: Path) -> None:
    source = tmp_path / "project"
    (source / "pkg").mkdir(parents=True)
    (source / "jobs" / "old-job").mkdir(parents=True)
    (source / "jobs" / "old-job" / "request.json").write_text("{}")
    (source / "main.py").write_text("print('hi')\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "pkg" / "x.pyc").write_text("")
    (source / "jobs" / "old-job" / "log").write_text("")
    (source / "link").symlink_to("main.py")
    (source / ".torchxignore").write_text("*/*.pyc\n")
    (source / ".dockerignore").write_text("main.py\n")  # not slurm's: torchx's slurm reads .torchxignore only

    copied = copy_workspace(source, tmp_path / "jobs" / "job" / "workspace", source / "jobs")

    target = tmp_path / "jobs" / "job" / "workspace"
    assert sorted(path.relative_to(target).as_posix() for path in target.rglob("*")) == [
        ".dockerignore", ".torchxignore", "link", "main.py", "run.sh"]
    assert os.readlink(target / "link") == "main.py" and os.access(target / "run.sh", os.X_OK)
    assert copied.files == 5 and not copied.large


def test_with_job_dir_the_workspace_itself_earlier_jobs_are_not_copied_into_the_next(tmp_path: Path) -> None:
    source = tmp_path / "project"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "model.py").write_text("")
    for job in ("job-1", "job-2"):
        copy_workspace(source, source / job / "workspace", source)
        (source / job / "request.json").write_text("{}")  # what the scheduler writes next

    copied = sorted(path.relative_to(source / "job-2").as_posix() for path in (source / "job-2").rglob("*"))
    assert copied == ["request.json", "workspace", "workspace/pkg", "workspace/pkg/model.py"]


def test_a_large_workspace_is_told_what_to_exclude(tmp_path: Path) -> None:
    source = tmp_path / "project"
    (source / "venv").mkdir(parents=True)
    for index in range(LARGE_FILES + 1):
        (source / "venv" / f"f{index}").write_bytes(b"x" * 10)
    (source / "main.py").write_text("")

    copied = copy_workspace(source, tmp_path / "copy", tmp_path / "jobs")

    assert copied.large and copied.largest[0] == ("venv/", (LARGE_FILES + 1) * 10)
    line = copied.advice(source)
    assert "\n" not in line and f"{LARGE_FILES + 2:,} files" in line and f"{source}/.torchxignore" in line
    assert "venv/ (50 kB)" in line and "--workspace ''" in line


def test_two_roles_with_different_workspaces_are_refused(tmp_path: Path) -> None:
    first, second = Role("a", "img"), Role("b", "img")
    assert workspace_of([first, second], {}) == ""
    assert workspace_of([first, second], {id(first): (first, tmp_path), id(second): (second, tmp_path)}) == str(tmp_path)
    assert workspace_of([first], {id(first): (second, tmp_path)}) == ""  # another role's, not this one's
    with pytest.raises(InvalidArgumentError, match="roles of one slurm job name different workspaces"):
        workspace_of([first, second], {id(first): (first, tmp_path), id(second): (second, tmp_path / "other")})

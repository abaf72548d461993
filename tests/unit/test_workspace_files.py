"""Which workspace files go into a local_docker workspace image, and the hash that names it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.docker.workspace import workspace_digest, workspace_files, workspace_path


def make(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_dockerignore_rules(tmp_path: Path) -> None:
    make(tmp_path, {
        ".dockerignore": "# comment\n*.pyc\n/build\n**/cache\ndata/*.bin\n!data/keep.bin\nlogs\n!logs/important.log\n",
        "main.py": "", "a.pyc": "", "pkg/b.pyc": "", "build/out.o": "", "src/build/kept.py": "",
        "cache/x": "", "deep/er/cache/y": "", "data/big.bin": "", "data/keep.bin": "", "data/sub/z.bin": "",
        "logs/debug.log": "", "logs/important.log": "",
    })

    # As Docker: `*.pyc` and `/build` match at the top only, `**/cache` at any depth.
    assert workspace_files(tmp_path) == [
        ".dockerignore", "data/keep.bin", "data/sub/z.bin", "logs/important.log", "main.py", "pkg/b.pyc",
        "src/build/kept.py",
    ]


def test_torchxignore_applies_too_and_symlinks_are_kept_as_links(tmp_path: Path) -> None:
    make(tmp_path, {".torchxignore": "secret*\n", "secret.txt": "", "main.py": ""})
    (tmp_path / "link").symlink_to("main.py")
    (tmp_path / "dirlink").symlink_to("/usr")

    assert workspace_files(tmp_path) == [".torchxignore", "dirlink", "link", "main.py"]


def test_digest_follows_content_names_modes_and_base_but_not_ignored_files_or_times(tmp_path: Path) -> None:
    root = make(tmp_path, {".dockerignore": "*.log\n", "main.py": "print(1)\n", "run.log": "a"})
    first = workspace_digest(root, "sha256:base")

    (root / "run.log").write_text("changed")
    os.utime(root / "main.py", (1, 1))
    assert workspace_digest(root, "sha256:base") == first
    assert workspace_digest(root, "sha256:other") != first
    (root / "main.py").chmod(0o755)
    executable = workspace_digest(root, "sha256:base")
    assert executable != first
    (root / "main.py").write_text("print(2)\n")
    assert workspace_digest(root, "sha256:base") not in (first, executable)
    (root / "main.py").rename(root / "other.py")
    assert workspace_digest(root, "sha256:base") not in (first, executable)


def test_workspace_forms(tmp_path: Path) -> None:
    assert workspace_path(f"file://{tmp_path}") == tmp_path.resolve()
    assert workspace_path(str(tmp_path)) == tmp_path.resolve()
    with pytest.raises(InvalidArgumentError, match=r"unsupported workspace 's3://bucket/x': local_docker takes a directory"):
        workspace_path("s3://bucket/x")
    with pytest.raises(InvalidArgumentError, match=r"workspace '/no/such/dir' is not a directory: give a directory path"):
        workspace_path("/no/such/dir")

"""Which workspace files go into a local_docker workspace image, and the hash that names it."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.images.workspace import (
    GENERATED_DOCKERFILE,
    _created_ns,
    build_context,
    workspace_digest,
)
from torchx_ext.schedulers.common.workspace_files import workspace_files, workspace_path


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


def test_digest_follows_content_names_modes_base_and_directory_but_not_ignored_files_or_times(tmp_path: Path) -> None:
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
    renamed = workspace_digest(root, "sha256:base")
    assert renamed not in (first, executable)
    # A copy elsewhere (a clone, a worktree) has images of its own, kept per directory.
    copy = make(tmp_path / "copy", {".dockerignore": "*.log\n", "other.py": "print(2)\n", "run.log": "changed"})
    (copy / "other.py").chmod(0o755)
    assert workspace_digest(copy, "sha256:base") != renamed


def test_workspace_forms(tmp_path: Path) -> None:
    assert workspace_path(f"file://{tmp_path}", "local_docker") == tmp_path.resolve()
    assert workspace_path(str(tmp_path), "local_docker") == tmp_path.resolve()
    with pytest.raises(InvalidArgumentError, match=r"unsupported workspace 's3://bucket/x': local_docker takes a directory"):
        workspace_path("s3://bucket/x", "local_docker")
    with pytest.raises(InvalidArgumentError, match=r"workspace '/no/such/dir' is not a directory: give a directory path"):
        workspace_path("/no/such/dir", "local_docker")


def test_patterns_as_docker_compiles_them(tmp_path: Path) -> None:
    make(tmp_path, {
        ".dockerignore": "?.txt\n[ab].c\n[!x].h\na/**/deep\n**/*.tmp\nlit\\*eral\n  # not a comment\n",
        "x.txt": "", "xy.txt": "", "a.c": "", "c.c": "", "!.h": "", "x.h": "", "y.h": "",
        "a/deep": "", "a/1/2/deep": "", "a/xdeep": "", "t.tmp": "", "s/t.tmp": "", "lit*eral": "", "litxeral": "",
        "# not a comment": "",
    })

    # `?` is one character, `**/` zero or more whole segments, `[!x]` is `!` or `x` (Go's
    # classes negate with `^` only), `\` escapes, and `#` starts a comment only in column 0.
    assert workspace_files(tmp_path) == [".dockerignore", "a/xdeep", "c.c", "litxeral", "xy.txt", "y.h"]


def test_an_exception_reaches_into_an_excluded_directory_and_others_are_not_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(tmp_path, {
        ".dockerignore": "build\n.git\n!*/keep.txt\n",
        "build/keep.txt": "", "build/out.o": "", ".git/HEAD": "", ".git/objects/x/keep": "", "main.py": "",
    })
    walked = []
    scandir = os.scandir

    def recording(path: Path) -> object:
        walked.append(Path(path).relative_to(tmp_path).as_posix())
        return scandir(path)

    monkeypatch.setattr(os, "scandir", recording)
    assert workspace_files(tmp_path) == [".dockerignore", "build/keep.txt", "main.py"]
    # `!*/keep.txt` may match under build/ and .git/; without it neither is walked.
    assert sorted(walked) == [".", ".git", ".git/objects", ".git/objects/x", "build"]
    (tmp_path / ".dockerignore").write_text("build\n.git\n!build/keep.txt\n")
    walked.clear()
    assert workspace_files(tmp_path) == [".dockerignore", "build/keep.txt", "main.py"]
    assert sorted(walked) == [".", "build"]


def test_fifos_are_left_out_and_a_bad_pattern_is_named(tmp_path: Path) -> None:
    make(tmp_path, {"main.py": ""})
    os.mkfifo(tmp_path / "pipe")
    assert workspace_files(tmp_path) == ["main.py"]
    assert workspace_digest(tmp_path, "sha256:base")  # would block reading the FIFO
    (tmp_path / ".torchxignore").write_text("data[\n")
    with pytest.raises(InvalidArgumentError, match=r"bad pattern 'data\[' in .*\.torchxignore"):
        workspace_files(tmp_path)


def test_digest_follows_symlink_targets(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": "", "b.py": ""})
    (tmp_path / "link").symlink_to("a.py")
    first = workspace_digest(tmp_path, "sha256:base")
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to("b.py")
    assert workspace_digest(tmp_path, "sha256:base") != first


def test_build_context_holds_the_files_and_one_dockerfile(tmp_path: Path) -> None:
    make(tmp_path, {".dockerignore": "*.log\n", ".torchxignore": "", "main.py": "x", "pkg/m.py": "", "a.log": ""})
    (tmp_path / "main.py").chmod(0o755)

    with build_context(tmp_path, "FROM sha256:base\nCOPY . .\n") as context, tarfile.open(fileobj=context) as tar:
        members = {member.name: member for member in tar.getmembers()}
        assert sorted(members) == [".dockerignore", GENERATED_DOCKERFILE, "main.py", "pkg/m.py"]
        assert members["main.py"].mode & 0o111
        assert read(tar, GENERATED_DOCKERFILE) == "FROM sha256:base\nCOPY . .\n"
        # Not the workspace's .dockerignore: one that keeps the Dockerfile out of `COPY . .`.
        assert read(tar, ".dockerignore") == f"{GENERATED_DOCKERFILE}\n.dockerignore\n"

    make(tmp_path, {"Dockerfile.torchx": "ARG IMAGE\nFROM $IMAGE\n"})
    with build_context(tmp_path, "FROM unused\n") as context, tarfile.open(fileobj=context) as tar:
        assert GENERATED_DOCKERFILE not in tar.getnames()
        assert read(tar, ".dockerignore") == "Dockerfile.torchx\n.dockerignore\n"


def read(tar: tarfile.TarFile, name: str) -> str:
    file = tar.extractfile(name)
    assert file is not None
    return file.read().decode()


def test_an_empty_workspace_name_is_not_the_current_directory() -> None:
    for empty in ("", "file://"):
        with pytest.raises(InvalidArgumentError, match="is not a directory"):
            workspace_path(empty, "local_docker")
    with pytest.raises(InvalidArgumentError, match=r"unsupported workspace 'buck://x'"):
        workspace_path("buck://x", "local_docker")


def test_creation_times_order_by_time_not_text() -> None:
    class Image:
        def __init__(self, created: object) -> None:
            self.attrs = {"Created": created}

    times = ["2026-11-22T11:54:01Z", "2026-11-22T11:54:01.5Z", "2026-11-22T11:54:01.52Z",
             "2026-11-22T12:54:01.6+01:00", "2026-11-22T11:54:02.000000001Z"]
    assert sorted(times, key=lambda text: _created_ns(Image(text))) == times
    assert _created_ns(Image(1)) == 10**9


def test_an_ignore_file_that_cannot_be_read_is_refused_rather_than_skipped(tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("")
    (tmp_path / ".dockerignore").write_bytes(b"secrets/\n\xff\xfe\n")
    with pytest.raises(InvalidArgumentError, match=r"cannot read .*\.dockerignore \(not UTF-8 text\): its exclusions"):
        workspace_files(tmp_path)

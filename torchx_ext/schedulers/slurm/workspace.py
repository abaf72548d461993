"""slurm workspaces: the workspace is copied into the job's own directory at submission, and every
step runs in the copy.

So an edit (or a ``git checkout``) made while the job waits in the queue does not change what it
runs, and the job's directory keeps the code that ran. What ``.torchxignore`` excludes is not
copied (torchx's own slurm reads that file only, not ``.dockerignore``); the job directories
themselves are never copied into a job, where ``job_dir`` lies inside the workspace.

torchx's builtin copies only when ``-cfg job_dir`` is given, and then the job runs in ``job_dir``,
which must not exist. Ours copies into ``{job_dir}/{app id}/workspace`` on every submission with a
workspace (``torchx run`` passes the current directory; ``--workspace ''`` runs in the submit
directory, as torchx does without ``job_dir``).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from torchx.specs import Role

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.workspace_files import TORCHX_IGNORE, workspace_files

REQUEST_NAME = "request.json"
"""What every job directory holds (``records.SlurmJobDir.request``)."""

LARGE_FILES = 5_000
LARGE_BYTES = 100 * 10**6
"""Over either, a submission says what to exclude: 10,000 files and 210 MB took 1.3 to 3.9 s to copy
on the test machine (``scripts/bench/workspace_copy.py``; docs/workspaces.md)."""
MOST_NAMED = 3


@dataclass(frozen=True)
class WorkspaceCopy:
    files: int
    bytes: int
    seconds: float
    largest: tuple[tuple[str, int], ...] = ()
    """The top-level entries with the most bytes, for a workspace worth a word."""

    @property
    def large(self) -> bool:
        return self.files > LARGE_FILES or self.bytes > LARGE_BYTES

    def advice(self, source: Path) -> str:
        """The one line a large workspace gets."""
        named = ", ".join(f"{name} ({_size(size)})" for name, size in self.largest)
        return (f"torchx: warning: the workspace {source} is {self.files:,} files, {_size(self.bytes)}, copied into "
                f"the job's directory on every submission ({self.seconds:.1f} s): list what the job does not need in "
                f"{source / TORCHX_IGNORE}, e.g. the largest: {named}; or run in place with --workspace ''")


def workspace_of(roles: list[Role], given: dict[int, tuple[Role, Path]]) -> str:
    """The directory the roles were given as their workspace ("": none); ``given``: by ``id(role)``,
    the role (held, so that its id is not another's) and what ``build_workspace_and_update_role``
    was told for it."""
    found = {str(given[id(role)][1]) for role in roles if id(role) in given and given[id(role)][0] is role}
    if len(found) > 1:
        raise InvalidArgumentError(f"roles of one slurm job name different workspaces ({', '.join(sorted(found))}): "
                                   "a job runs in one directory; give one workspace")
    return next(iter(found), "")


def copy_workspace(source: Path, destination: Path, job_dirs: Path) -> WorkspaceCopy:
    """Copies the workspace's files (modes and times kept, links as links) into ``destination``
    (inside a job's directory under ``job_dirs``), leaving out the job directories themselves
    where ``job_dirs`` lies inside the workspace (or is it). A file gone meanwhile is left out."""
    started = time.monotonic()
    parent = job_dirs.resolve()
    this_job = destination.resolve().parent

    def a_job_dir(directory: Path) -> bool:
        resolved = directory.resolve()
        return resolved.parent == parent and (resolved == this_job or (resolved / REQUEST_NAME).exists())

    files = workspace_files(source, (TORCHX_IGNORE,), leave_out=a_job_dir)
    sizes: dict[str, int] = {}
    total = copied = 0
    destination.mkdir(parents=True, exist_ok=True)  # the steps' directory, even for no files
    made: set[Path] = {destination}
    for name in files:
        target = destination / name
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        path = source / name
        try:
            if path.is_symlink():
                os.symlink(os.readlink(path), target)
                copied += 1
                continue
            shutil.copy2(path, target)
        except FileNotFoundError as error:
            if error.filename == str(path):
                continue  # removed since it was listed (an edit under way): as if it had not been there
            raise
        size = target.stat().st_size
        copied += 1
        total += size
        top = name.split("/", 1)[0] + ("/" if "/" in name else "")
        sizes[top] = sizes.get(top, 0) + size
    largest = tuple(sorted(sizes.items(), key=lambda item: -item[1])[:MOST_NAMED])
    return WorkspaceCopy(copied, total, time.monotonic() - started, largest)


def _size(count: int) -> str:
    if count < 10**6:
        return f"{count / 1000:.0f} kB"
    if count < 10**9:
        return f"{count / 10**6:.0f} MB"
    return f"{count / 10**9:.1f} GB"

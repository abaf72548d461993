"""A job's directory of records, as the backends that keep one (local_cwd, slurm) lay it out:
its request first, from which ``describe_native`` reads the job back as its dry run showed it;
and the registry that finds a job's directory by app id from any directory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Optional, Protocol, TypeVar

from torchx_ext.errors import JobRecordError
from torchx_ext.schedulers.common.files import DIR_MODE, state_root, write_atomically

if TYPE_CHECKING:
    from torchx.specs import AppDryRunInfo


class JobDirectory:
    # A plain class: each dataclass costs every torchx CLI call ~1 ms.
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def request(self) -> Path:
        return self.path / "request.json"

    def recorded(self) -> bool:
        """Whether the job's records are all written (a directory being created is not a job yet)."""
        return self.request.is_file()


Job = TypeVar("Job", bound=JobDirectory)


class JobRegistry(Generic[Job]):
    """A backend's registry: one file per app id under ``{state root}/jobs`` naming the job's
    directory, so that a job whose directory the user chose is found from a new shell."""

    def __init__(self, backend: str, state_root_env: str, job_dir: Callable[[Path], Job],
                 valid_id: Callable[[str], bool], submission_order: Callable[[os.DirEntry[str]], Any]) -> None:
        self.backend = backend
        self.state_root_env = state_root_env
        self.job_dir = job_dir
        self.valid_id = valid_id
        self.submission_order = submission_order

    def state_root(self) -> Path:
        """Where the backend keeps its registry and, by default, its jobs (read each time: the
        environment may name another)."""
        return state_root(self.state_root_env, self.backend)

    @property
    def path(self) -> Path:
        return self.state_root() / "jobs"

    def register(self, app_id: str, job_dir: Path) -> None:
        self.path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        write_atomically(self.path / app_id, str(job_dir.resolve()))

    def unregister(self, app_id: str) -> None:
        (self.path / app_id).unlink(missing_ok=True)

    def find(self, app_id: str) -> Job | None:
        """The job directory of ``app_id``; None for an unknown id, or one no job of this backend can have."""
        if not self.valid_id(app_id):
            return None
        try:
            job = self.job_dir(Path((self.path / app_id).read_text()))
        except OSError:
            return None
        return job if job.recorded() else None

    def app_ids(self) -> list[str]:
        """Every registered app id, in submission order."""
        try:
            entries = [entry for entry in os.scandir(self.path) if entry.is_file() and not entry.name.startswith(".")]
        except FileNotFoundError:
            return []
        return [entry.name for entry in sorted((entry for entry in entries if self.valid_id(entry.name)),
                                               key=self.submission_order)]


class WithRequest(Protocol):
    def read_request(self) -> Any:
        """The job's request; JobRecordError (naming the file) when it cannot be read."""


def submitted_request(job: Optional[WithRequest], describe: Callable[[Any], str]) -> Optional["AppDryRunInfo"]:
    """The request ``job`` was submitted with, shown as its dry run was (torchx-nightly's
    ``describe_native``); None for no job, or one whose request cannot be read."""
    try:
        # Imported here: the local supervisor and Slurm's step read job directories too, and
        # importing torchx would delay every replica's start.
        from torchx.specs import AppDryRunInfo

        return None if job is None else AppDryRunInfo(job.read_request(), describe)
    except JobRecordError:
        return None

"""A job's directory of records, as the backends that keep one (local_cwd, slurm) lay it out:
its request first, from which ``describe_native`` reads the job back as its dry run showed it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

from torchx_ext.errors import JobRecordError

if TYPE_CHECKING:
    from torchx.specs import AppDryRunInfo


class JobDirectory:
    # A plain class: each dataclass costs every torchx CLI call ~1 ms.
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def request(self) -> Path:
        return self.path / "request.json"


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

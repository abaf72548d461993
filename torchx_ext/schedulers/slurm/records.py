"""slurm's records: the job directory every node reads and writes, and the registry that finds
it by app id from any directory.

A job directory must be visible at the same path on every node (a shared file system: home
directories usually are). It holds ``request.json`` (what each role runs), ``batch.sh`` (the
script given to ``sbatch``), the replicas' logs ``<role>-<k>.out``/``.err`` (``srun --output``
and ``--error``) and ``<role>-<k>.log`` (both, in arrival order), each with an index of arrival
times, ``<role>-<k>.started``/``.exit`` (written by the step program: the node it ran on, and
how it ended), ``<role>.rdzv-port`` (the port node rank 0 picked), ``cancelled`` (a cancel was asked for) and ``final.json`` (the end Slurm
reported, kept once read). A job in an allocation has no Slurm job of its own: its app id is the
allocation's id and the directory's name, and ``driver.json`` (the host and pid of the driver
that runs ``batch.sh``), ``driver.out`` and ``driver.exit`` (how the script ended) stand for it.

Standard library only: the step program imports this module on every node.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from torchx_ext.errors import JobRecordError
from torchx_ext.schedulers.common.job_dir import JobDirectory, JobRegistry
from torchx_ext.schedulers.slurm.request import SlurmJobRequest
from torchx_ext.schedulers.common.states import how_it_ended

STATE_ROOT_ENV = "TORCHX_EXT_SLURM_STATE"
APP_ID = re.compile(r"(\d+)(-[A-Za-z0-9][A-Za-z0-9_.-]*)?")
"""A Slurm job id; a job in an allocation: the allocation's, then its directory's name."""


@dataclass(frozen=True)
class StepEnd:
    """How a replica's program ended, as its step program saw it."""

    exit_code: int
    """Negative: killed by that signal."""
    at: float
    node: str


class SlurmJobDir(JobDirectory):
    @property
    def script(self) -> Path:
        return self.path / "batch.sh"

    @property
    def workspace(self) -> Path:
        """The copy of the workspace the job runs in (when submitted with one)."""
        return self.path / "workspace"

    @property
    def cancelled(self) -> Path:
        return self.path / "cancelled"

    @property
    def driver(self) -> Path:
        """Where the driver of a job in an allocation runs: its host and pid."""
        return self.path / "driver.json"

    @property
    def driver_exit(self) -> Path:
        """The driver's exit code, written as it ends."""
        return self.path / "driver.exit"

    @property
    def driver_output(self) -> Path:
        return self.path / "driver.out"

    @property
    def final(self) -> Path:
        return self.path / "final.json"

    def log(self, role: str, replica_id: int, stream: str) -> Path:
        suffix = {"stdout": "out", "stderr": "err", "combined": "log"}[stream]
        return self.path / f"{role}-{replica_id}.{suffix}"

    def started(self, role: str, replica_id: int) -> Path:
        return self.path / f"{role}-{replica_id}.started"

    def exit(self, role: str, replica_id: int) -> Path:
        return self.path / f"{role}-{replica_id}.exit"

    def restarts(self, role: str) -> Path:
        """How many times the driver started the role's step again (absent: none)."""
        return self.path / f"{role}.restarts"

    def read_restarts(self, role: str) -> int:
        try:
            return int(self.restarts(role).read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def replica_restarts(self, role: str, replica_id: int) -> Path:
        """How many times the replica's step program started a hot-spare role's replica again in
        place (absent: none)."""
        return self.path / f"{role}-{replica_id}.restarts"

    def read_replica_restarts(self, role: str, replica_id: int) -> int:
        try:
            return int(self.replica_restarts(role, replica_id).read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def spare(self, role: str, replica_id: int) -> Path:
        """Present while the replica's launcher waits as a hot spare (its step program mirrors the
        liveness file, which is on the node's own disk)."""
        return self.path / f"{role}-{replica_id}.spare"

    def last_failure(self, role: str) -> Path:
        """What made the driver run the role's step again last (absent: nothing yet)."""
        return self.path / f"{role}.last_failure"

    def read_last_failure(self, role: str) -> str:
        try:
            return self.last_failure(role).read_text().strip()
        except OSError:
            return ""

    @property
    def rank0_address(self) -> Path:
        """The address of the first role's node rank 0, for the other roles of a job in an allocation."""
        return self.path / "rank0.address"

    def rendezvous_port(self, role: str) -> Path:
        return self.path / f"{role}.rdzv-port"

    def error_file(self, role: str, replica_id: int) -> Path:
        return self.path / f"{role}-{replica_id}.error.json"

    def read_request(self) -> SlurmJobRequest:
        try:
            return SlurmJobRequest.from_json(self.request.read_text())
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise JobRecordError(f"{self.request}: unreadable ({error})") from None

    def read_step_end(self, role: str, replica_id: int) -> StepEnd | None:
        try:
            return StepEnd(**json.loads(self.exit(role, replica_id).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def started_on(self, role: str, replica_id: int) -> str:
        """The node the replica runs (ran) on; empty before it started."""
        try:
            return str(json.loads(self.started(role, replica_id).read_text())["node"])
        except (OSError, ValueError, TypeError, KeyError):
            return ""


JOBS: JobRegistry[SlurmJobDir] = JobRegistry("slurm", STATE_ROOT_ENV, SlurmJobDir,
                                              lambda app_id: APP_ID.fullmatch(app_id) is not None,
                                              submission_order=lambda entry: (int(entry.name.split("-")[0]), entry.name))


def first_failure(ends: dict[tuple[str, int], StepEnd | None]) -> tuple[str, int] | None:
    """The replica whose program failed first: the others were most likely stopped because of it."""
    failed = [(end.at, key) for key, end in ends.items() if end is not None and end.exit_code != 0]
    return min(failed)[1] if failed else None


def step_ended(end: StepEnd, root_cause: str) -> str:
    how = how_it_ended(end.exit_code)
    return f"{how}: {root_cause}" if root_cause else how

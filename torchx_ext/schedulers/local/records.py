"""local_cwd's records on disk: the job's state, where its request is kept (``request.py``), and
where to find a job.

Everything a later ``torchx status/log/cancel/list`` needs lives in the job's directory
(``{log_dir}/{app_id}``): ``request.json`` (what to run), ``state.json`` (written only by the
job's supervisor, atomically), ``supervisor`` (its pid, start time, host and boot) and
``cancel`` (a request to stop). A registry directory maps app ids to job directories, so a job whose
``log_dir`` was chosen by the user is still found from a new shell.

Standard library only: the supervisor imports this module and should start fast.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from torchx_ext.errors import JobRecordError
from torchx_ext.schedulers.common.app_ids import FILE_NAME_IDS
from torchx_ext.schedulers.common.files import DIR_MODE, write_atomically
from torchx_ext.schedulers.common.job_dir import JobDirectory, JobRegistry
from torchx_ext.schedulers.common.record_json import FORMAT_KEY, fields_of, list_of, versioned
from torchx_ext.schedulers.local.request import LocalJobRequest
from torchx_ext.schedulers.common.states import State
from torchx_ext.schedulers.local.processes import boot_id, process_start_ticks

STATE_ROOT_ENV = "TORCHX_EXT_LOCAL_STATE"
# Written into every record; a record of another format is reported, not guessed at.
FORMAT_VERSION = 1
ERROR_FILE_NAME = "error.json"
"""A replica's torchelastic error file, in its log directory."""
LIVENESS_FILE_NAME = "liveness"
"""In a replica's log directory: its launcher's sign of life (``launcher/liveness.py``), touched or saying ``spare``."""


@dataclass
class ReplicaState:
    role: str
    replica_id: int
    state: State = State.PENDING
    pid: int | None = None
    exit_code: int | None = None
    restarts: int = 0
    error: str = ""
    """Why it failed: the launcher's root cause, else the tail of its stderr."""


@dataclass
class JobState:
    app_id: str
    state: State
    submitted_at: float
    replicas: list[ReplicaState]
    ended_at: float | None = None
    msg: str = ""
    last_failure: str = ""
    """The failure that made the last restart: which replica, how it ended and why."""

    @property
    def num_restarts(self) -> int:
        return sum(replica.restarts for replica in self.replicas)

    def to_json(self) -> str:
        return json.dumps({FORMAT_KEY: FORMAT_VERSION, **asdict(self)})

    @staticmethod
    def from_json(text: str) -> "JobState":
        _, data = versioned(text, (FORMAT_VERSION,))
        replicas = [ReplicaState(**fields_of(ReplicaState, replica)) for replica in list_of(data.pop("replicas", None))]
        state = JobState(**{**fields_of(JobState, {**data, "replicas": []}), "replicas": replicas})
        state.state = _state(state.state)
        for replica in replicas:
            replica.state = _state(replica.state)
        return state


_Record = TypeVar("_Record")


def _state(value: object) -> State:
    try:
        return State(value)
    except ValueError:
        raise JobRecordError(f"unknown state {value!r}: valid states are {', '.join(s.value for s in State)}") from None


STEPPED_ASIDE = "another supervisor runs this job"
"""How a second supervisor of a job (a warm start that answered late) begins the line it ends with."""


class LocalJobDir(JobDirectory):
    @property
    def state(self) -> Path:
        return self.path / "state.json"

    def recorded(self) -> bool:
        return self.state.is_file()

    @property
    def supervisor(self) -> Path:
        return self.path / "supervisor"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    @property
    def cancel(self) -> Path:
        return self.path / "cancel"

    def read_request(self) -> LocalJobRequest:
        """The job's request; JobRecordError (naming the file) when it cannot be read."""
        return _read(self.request, LocalJobRequest.from_json)

    def read_state(self) -> JobState:
        """The job's state; JobRecordError (naming the file) when it cannot be read."""
        return _read(self.state, JobState.from_json)

    def write_state(self, state: JobState) -> None:
        write_atomically(self.state, state.to_json())

    def create(self, request: LocalJobRequest, state: JobState) -> None:
        """Make the job's directory (only its user may enter) with its request and first state."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(mode=DIR_MODE)
        os.chmod(self.path, DIR_MODE)  # mkdir's mode is cut by the umask; this is not
        write_atomically(self.request, request.to_json())
        self.write_state(state)

    def record_supervisor(self, record: SupervisorRecord, *, unless_recorded: bool = False) -> None:
        """Writes who supervises the job. The supervisor that holds the job's lock writes itself,
        over whatever is there; its submitter writes the pid it started ``unless_recorded``: a warm
        start that answered too late and the cold one started instead both run, the one that did
        not get the lock ends, and the record must name the one that did."""
        if not unless_recorded:
            write_atomically(self.supervisor, str(record))
            return
        staged = self.supervisor.with_name(f".supervisor.{os.getpid()}")
        staged.write_text(str(record))
        try:
            os.link(staged, self.supervisor)  # fails where one is recorded, never half-written
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links (some FUSE and SMB mounts)
            if self.supervisor_record() is None:
                write_atomically(self.supervisor, str(record))
        finally:
            staged.unlink(missing_ok=True)

    def supervisor_record(self) -> SupervisorRecord | None:
        """Who supervises the job, if it was started."""
        try:
            pid, ticks, host, boot = self.supervisor.read_text().split()
            return SupervisorRecord(int(pid), int(ticks), host, boot)
        except (OSError, ValueError):
            return None

    def supervisor_alive(self) -> bool:
        """Whether the supervisor runs. A job on another host (a shared home directory) counts
        as alive: nothing here can tell, and nothing here may act on its processes."""
        record = self.supervisor_record()
        if record is None:
            return False
        if not record.on_this_host():
            return True
        return record.boot_id == boot_id() and process_start_ticks(record.pid) == record.ticks


class SupervisorRecord:
    def __init__(self, pid: int, ticks: int, host: str, boot_id: str) -> None:
        self.pid = pid
        self.ticks = ticks
        """The process's start time in clock ticks since boot: tells it from a later one with its pid."""
        self.host = host
        self.boot_id = boot_id

    @staticmethod
    def of(pid: int) -> "SupervisorRecord":
        return SupervisorRecord(pid, process_start_ticks(pid) or 0, os.uname().nodename, boot_id())

    def on_this_host(self) -> bool:
        return self.host == os.uname().nodename

    def __str__(self) -> str:
        return f"{self.pid} {self.ticks} {self.host} {self.boot_id}"


def _read(path: Path, parse: Callable[[str], _Record]) -> _Record:
    try:
        text = path.read_text()
    except OSError as error:
        raise JobRecordError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        return parse(text)
    except JobRecordError as error:
        raise JobRecordError(f"{path}: {error}") from None
    except (TypeError, ValueError, KeyError) as error:
        raise JobRecordError(f"{path}: malformed ({error!r})") from None


JOBS: JobRegistry[LocalJobDir] = JobRegistry("local_cwd", STATE_ROOT_ENV, LocalJobDir, FILE_NAME_IDS.matches,
                                              submission_order=lambda entry: entry.stat().st_mtime)

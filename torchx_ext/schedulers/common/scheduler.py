"""The torchx-facing shell of every backend: one level below torchx's ``Scheduler``.

torchx's ``Scheduler`` owns the public verbs (``submit_dryrun`` checks options, ``cancel``
checks ``exists()`` first) and leaves hooks. ``SchedulerShell`` fills the ones that are the same
on every backend of ours, so a backend writes only what really differs (submission,
``describe``'s reading, ``list``, ``_cancel_existing``, ``_delete_existing``) plus one hook,
``_replica_lines``:

- ``log_iter``: torchx's eight arguments checked once (``LogQuery``; a stream alone refused where the
  backend lacks ``LOG_STREAMS``, saying why), then the backend's lines
  of one replica, filtered; an unknown app or replica is one error naming the known ones;
- ``delete``: torchx-nightly's verb, which torchx 0.7.0 lacks (``torchx delete`` is ours there);
- ``_validate``: every role has an image, on backends that run images (``image_hint``);
- ``wait_for_change``: what ``torchx run --wait`` blocks on between two reads of the job's state
  (a backend watches what its system offers; this default only pauses briefly).

``describe_response`` builds torchx's ``DescribeAppResponse`` from the ``JobView`` each backend
fills (state, roles, replicas, restarts, spares, elastic roles, its own message), with one
placeholder for "no error": ``torchx status`` reads the same on every scheduler.
"""

from __future__ import annotations

import abc
import datetime
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, TypedDict, TypeVar

from torchx.schedulers.api import DescribeAppResponse, Scheduler, Stream
from torchx.specs import NONE, AppDef, ReplicaStatus, Role, RoleStatus, runopts

from torchx_ext.error_file import ErrorReport
from torchx_ext.numa.topology import DEFAULT_SYSFS_ROOT
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.checks import check_image
from torchx_ext.schedulers.common.job_dir import Job, JobRegistry
from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.role_metadata import is_torchft
from torchx_ext.schedulers.backends import LOG_STREAMS, TORCHFT, backend_named
from torchx_ext.schedulers.common.states import State, app_state, joined_message, restarts_message, spares_message

NO_ERROR = NONE
"""A replica's ``structured_error_msg`` when it has no error (torchx's placeholder)."""

Opts = TypeVar("Opts")
DEFAULT_PAUSE_S = 0.25


class CancelGraceOpts(TypedDict, total=False):
    """The ``-cfg`` every backend takes."""

    cancel_grace: Optional[int]


class HostSliceOpts(CancelGraceOpts, total=False):
    """The ``-cfg`` of backends that run every replica on this host (local_cwd, local_docker)."""

    slice_replicas: Optional[bool]
    sysfs_root: Optional[str]


def add_cancel_grace_opt(opts: runopts, default: int, when: str) -> None:
    opts.add("cancel_grace", type_=int, default=default, help=f"seconds between SIGTERM and SIGKILL when {when}")


def add_host_slice_opts(opts: runopts, unit: str, cpus: str) -> None:
    """``slice_replicas`` and ``sysfs_root``; ``unit``: what runs a replica, ``cpus``: what of
    the host's CPUs and memory it is given."""
    opts.add("slice_replicas", type_=bool, default=True,
             help=f"give each {unit} its own {cpus} (whole NUMA nodes, else whole cores) and GPUs; "
             f"false: every {unit} may use the whole host")
    opts.add("sysfs_root", type_=str, default=DEFAULT_SYSFS_ROOT,
             help="read the host topology from this sysfs tree (another tree: plan, e.g. with --dryrun, "
             "as if on that machine)")


@dataclass(frozen=True)
class ReplicaReport:
    """One replica as a backend read it, for ``describe_response``."""

    role: str
    replica_id: int
    state: State | None
    """None: not reported yet (torchx's UNKNOWN)."""
    hostname: str
    error: ErrorReport | None = None


@dataclass(frozen=True)
class JobView:
    """A job as every backend reads it, whatever its system: what ``describe`` (``torchx status``)
    says of it is made from this alone (``describe_response``), so it reads the same on each."""

    app_id: str
    state: State
    roles: Sequence[Role]
    """torchx's roles, in the app's order (a backend that keeps the spec gives it whole)."""
    replicas: Sequence[ReplicaReport]
    num_restarts: int = 0
    """Every replica's restarts, summed (an app restarted as a whole: once per restart)."""
    error: ErrorReport | None = None
    """The report of the replica that ended the app."""
    message: str = ""
    """The backend's own word on the job (how it ended, why it waits); "": the summary below."""
    last_failure: str = ""
    """What made the last restart."""
    spares: Sequence[tuple[str, int]] = ()
    """Running replicas that wait as hot spares, as (role, replica id)."""
    elastic: Mapping[str, int] = field(default_factory=dict)
    """The elastic roles (``-j MIN:MAX``), each with its MIN."""
    ui_url: str | None = None

    def summary(self) -> str:
        """The message: the backend's own word, or the restarts and what made the last; then, while
        the job runs, how many replicas each elastic role runs and which wait as spares."""
        running = self.state is State.RUNNING
        return joined_message(self.message or restarts_message(self.num_restarts, self.last_failure),
                              elastic_summary(self.roles, self.replicas, self.elastic) if running else "",
                              spares_message(self.spares) if running else "")


def elastic_summary(roles: Sequence[Role], replicas: Iterable[ReplicaReport], elastic: Mapping[str, int]) -> str:
    """How many replicas each elastic role runs now, of its ``MIN..MAX``."""
    running: dict[str, int] = {}
    for replica in replicas:
        if replica.state is State.RUNNING:
            running[replica.role] = running.get(replica.role, 0) + 1
    return "; ".join(f"role {role.name} runs {running.get(role.name, 0)} of {elastic[role.name]}..{role.num_replicas} "
                     "replicas" for role in roles if role.name in elastic)


def describe_response(view: JobView) -> DescribeAppResponse:
    """torchx's answer to ``describe``: the replicas grouped under the roles (in that order, each
    by id), every replica's error report as torchx parses it (torchelastic's error-file JSON)
    or the no-error placeholder, and the one that ended the app, for the app; the message is
    ``view.summary()``."""
    by_role: dict[str, list[ReplicaReport]] = {role.name: [] for role in view.roles}
    for replica in view.replicas:
        by_role.setdefault(replica.role, []).append(replica)
    response = DescribeAppResponse(
        app_id=view.app_id,
        state=app_state(view.state),
        num_restarts=view.num_restarts,
        msg=view.summary(),
        ui_url=view.ui_url,
        roles=list(view.roles),
        roles_statuses=[
            RoleStatus(name, [
                ReplicaStatus(
                    id=replica.replica_id,
                    state=app_state(replica.state),
                    role=name,
                    hostname=replica.hostname,
                    structured_error_msg=replica.error.to_json() if replica.error else NO_ERROR,
                )
                for replica in sorted(found, key=lambda replica: replica.replica_id)
            ])
            for name, found in by_role.items()
        ],
    )
    if view.error is not None:
        response.structured_error_msg = view.error.to_json()
    return response


ReplicaKeys = list[tuple[str, int]]
"""Replicas by (role, replica id)."""


class SchedulerShell(Scheduler[Opts]):  # torchx has no types: its Scheduler is Any to mypy (pyproject)
    image_hint: ClassVar[str | None] = None
    """What image a role needs (said when it has none); None: the backend runs no images."""

    def _validate(self, app: AppDef, scheduler: str, cfg: Optional[Mapping[str, Any]] = None) -> None:
        # torchx-nightly passes cfg, 0.7.0 does not; no backend's check depends on it.
        if self.image_hint is not None:
            for role in app.roles:
                check_image(role, self.image_hint)
        backend = backend_named(self.backend)
        why = backend.why_not(TORCHFT) if backend is not None else None
        if why and any(is_torchft(role.metadata or {}) for role in app.roles):
            raise InvalidArgumentError(f"a torchft job (dist.hsdp) needs a lost replica group started again alone, "
                                       f"and {self.backend} cannot: {why}")

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: Optional[str] = None,
        since: Optional[datetime.datetime] = None,
        until: Optional[datetime.datetime] = None,
        should_tail: bool = False,
        streams: Optional[Stream] = None,
    ) -> Iterable[str]:
        """The lines of replica ``k`` of ``role_name`` that the query selects, with their ``\\n``.
        Bad arguments, an unknown app or replica raise here, before any line is read."""
        query = LogQuery.of(regex=regex, since=since, until=until, streams=streams, should_tail=should_tail)
        backend = backend_named(self.backend)
        why = backend.why_not(LOG_STREAMS) if backend is not None else None
        if query.stream != "combined" and why:
            raise InvalidArgumentError(f"streams={query.stream!r}: {why}; leave streams out (combined)")
        return query.select(self._replica_lines(app_id, role_name, k, query))

    @abc.abstractmethod
    def _replica_lines(self, app_id: str, role_name: str, replica_id: int,
                       query: LogQuery) -> Iterable[tuple[float, str]]:
        """(arrival time, line) of one replica's log for ``query.stream``, following it while
        ``query.should_tail`` and the job runs. Raises ``unknown_app`` or ``unknown_replica``
        when called (so not written as a generator function)."""

    def wait_for_change(self, app_id: str, timeout_s: float) -> bool:
        """Blocks until the job may have changed (True) or ``timeout_s`` passed with nothing seen
        (False). Backends watch what their system offers (records, engine events, API watches);
        a change they cannot see is caught by the caller's own occasional re-read."""
        time.sleep(min(timeout_s, DEFAULT_PAUSE_S))
        return True

    def unknown_app(self, app_id: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"unknown {self.backend} app {app_id!r}: `torchx list -s {self.backend}` shows the known ones")

    @staticmethod
    def unknown_replica(app_id: str, role_name: str, replica_id: int, known: Iterable[str]) -> InvalidArgumentError:
        """``known``: the app's replicas as ``role/id``."""
        return InvalidArgumentError(f"app {app_id} has no replica {role_name}/{replica_id}: it has {', '.join(known)}")

    def recorded_job(self, jobs: JobRegistry[Job], app_id: str) -> Job:
        """The job directory of ``app_id`` (backends that keep one); ``unknown_app`` where there is none."""
        job = jobs.find(app_id)
        if job is None:
            raise self.unknown_app(app_id)
        return job

    def check_replica(self, app_id: str, role_name: str, replica_id: int, known: Collection[tuple[str, int]]) -> None:
        """``unknown_replica`` unless (``role_name``, ``replica_id``) is one of the app's ``known`` replicas."""
        if (role_name, replica_id) not in known:
            raise self.unknown_replica(app_id, role_name, replica_id, (f"{role}/{index}" for role, index in known))

    def ask_for_stacks(self, app_id: str, role_name: str | None = None,
                       replica_id: int | None = None) -> ReplicaKeys:
        """Ask the launchers of the app's running replicas (all, a role's, or one) to write every rank's
        stack into their logs (``stack_request.py``); returns the replicas asked. Stops nothing."""
        raise InvalidArgumentError(f"{self.backend} cannot ask a job's launchers for their stacks yet")

    def stack_targets(self, app_id: str, replicas: Iterable[tuple[str, int, bool]], role_name: str | None,
                      replica_id: int | None) -> ReplicaKeys:
        """Of the app's ``replicas`` (role, id, running), the running ones ``role_name``/``replica_id``
        select; refuses an unknown role or replica, or a selection with none running, in one line."""
        known = sorted((role, index) for role, index, _ in replicas)
        if role_name is not None and replica_id is not None:
            self.check_replica(app_id, role_name, replica_id, known)
        elif role_name is not None and all(role != role_name for role, _ in known):
            raise InvalidArgumentError(f"app {app_id} has no role {role_name!r}: it has "
                                       f"{', '.join(sorted({role for role, _ in known}))}")
        chosen = sorted((role, index) for role, index, running in replicas
                        if running and role_name in (None, role) and replica_id in (None, index))
        if not chosen:
            which = "" if role_name is None else f" {role_name}" + ("" if replica_id is None else f"/{replica_id}")
            raise InvalidArgumentError(f"app {app_id} has no running replica{which}: nothing to ask for stacks")
        return chosen

    def delete(self, app_id: str) -> None:
        """Cancel the job if it runs, then remove what it left, logs included (torchx-nightly's
        ``torchx delete``; ours on torchx 0.7.0, which has no such verb)."""
        self._delete_existing(app_id)

    @abc.abstractmethod
    def _delete_existing(self, app_id: str) -> None:
        """Cancel, then remove the app's processes, containers or objects and records."""

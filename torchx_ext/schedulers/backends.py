"""The scheduler backends, listed once. Registration on both torchx lines reads this list (torchx
0.7.0's entry points, ``registration/metadata.py``; torchx-nightly's plugins,
``torchx_plugins/schedulers``), and so do the test suites' parametrizations. Adding a backend:
docs/layout.md.

Nothing imported, not even ``dataclasses``: torchx reads the registration on every command.
"""

from __future__ import annotations


class Feature:
    """Something a backend may or may not do for a job, as ``Backend.supports`` or ``lacks`` says."""

    __slots__ = ("name", "option", "meaning")

    def __init__(self, name: str, option: str | None, meaning: str) -> None:
        self.name = name
        self.option = option
        """The ``-cfg`` option that asks for it, if one does (a backend that lacks it has no such option)."""
        self.meaning = meaning


ELASTIC, SPARES, CANCEL_GRACE, WORKSPACES, WARM, ALLOCATION, LOG_STREAMS, TORCHFT = (
    "elastic", "spares", "cancel_grace", "workspaces", "warm", "allocation", "log_streams", "torchft")
FEATURES = (
    Feature(ELASTIC, None, "`-j MIN:MAX`: a role runs with MIN to MAX replicas, and carries on without a lost one"),
    Feature(SPARES, None, "hot spares (`dist.ddp --spares`): a waiting replica takes a lost one's place"),
    Feature(CANCEL_GRACE, "cancel_grace", "`-cfg cancel_grace`: the seconds a cancelled job's workers get "
            "between SIGTERM and SIGKILL"),
    Feature(WORKSPACES, None, "`--workspace`: the job runs your edited files, shipped with it"),
    Feature(WARM, "warm", "`-cfg warm`: launchers forked from an interpreter that has imported torch"),
    Feature(ALLOCATION, "allocation", "`-cfg allocation`: the job runs as steps of an allocation you hold"),
    Feature(LOG_STREAMS, None, "`torchx log --streams stdout` (or stderr): one stream alone"),
    Feature(TORCHFT, None, "`dist.hsdp`: torchft replica groups, a lost one started again alone while the others "
            "go on, and their lighthouse"),
)


class Backend:
    """One backend: the torchx scheduler name it registers under, its package, and what it supports."""

    __slots__ = ("scheduler", "package", "torchx_builtin", "supports", "lacks")

    def __init__(self, scheduler: str, package: str, torchx_builtin: str | None, supports: dict[str, str],
                 lacks: dict[str, str]) -> None:
        self.scheduler = scheduler
        self.package = package
        """Its subpackage of ``torchx_ext.schedulers``, whose ``create_scheduler`` torchx calls."""
        self.torchx_builtin = torchx_builtin
        """The module of the torchx builtin whose name it takes (and whose options and meanings it keeps)."""
        self.supports = supports
        """Each feature (``FEATURES``) it supports, with when ("": always). The conformance suite runs
        each on it (tests/unit/test_backend_support.py checks that some test does)."""
        self.lacks = lacks
        """Each feature it lacks, with why: its refusal says so (an option's, a log stream's, a spare's)."""

    def why_not(self, feature: str) -> str | None:
        """Why it lacks ``feature``; None when it supports it."""
        return self.lacks.get(feature)

    @property
    def module(self) -> str:
        """Its package's module name, whose ``create_scheduler`` torchx calls."""
        return f"torchx_ext.schedulers.{self.package}"

    @property
    def factory(self) -> str:
        """The entry point's value: ``module:create_scheduler``."""
        return f"{self.module}:create_scheduler"


BACKENDS = (  # the first is the default of `torchx run`
    Backend("local_cwd", "local", "torchx.schedulers.local_scheduler",
            supports={ELASTIC: "", SPARES: "", CANCEL_GRACE: "", WARM: "", LOG_STREAMS: "", TORCHFT: ""},
            lacks={WORKSPACES: "a local_cwd job runs in the current directory, as torchx's does",
                   ALLOCATION: "a local_cwd job runs on this host, in no allocation"}),
    Backend("local_docker", "docker", "torchx.schedulers.docker_scheduler",
            supports={ELASTIC: "", SPARES: "", CANCEL_GRACE: "", WORKSPACES: "", LOG_STREAMS: "", TORCHFT: ""},
            lacks={WARM: "each replica is a container of its own, started with its image",
                   ALLOCATION: "a local_docker job runs on this host's engine, in no allocation"}),
    Backend("kubernetes", "kubernetes", "torchx.schedulers.kubernetes_scheduler",
            supports={ELASTIC: "", SPARES: "with -cfg backend=job", CANCEL_GRACE: "", WORKSPACES: "",
                      TORCHFT: "with -cfg backend=job"},
            lacks={WARM: "each replica is a pod of its own, started with its image",
                   ALLOCATION: "Kubernetes schedules each pod: there is no allocation to run in",
                   LOG_STREAMS: "Kubernetes keeps a pod's stdout and stderr as one log"}),
    Backend("slurm", "slurm", "torchx.schedulers.slurm_scheduler",
            supports={ELASTIC: "", SPARES: "", WORKSPACES: "", WARM: "in an allocation", ALLOCATION: "",
                      LOG_STREAMS: "", TORCHFT: ""},
            lacks={CANCEL_GRACE: "Slurm's KillWait (slurm.conf) is the time between SIGTERM and SIGKILL"}),
)
SCHEDULERS = tuple(backend.scheduler for backend in BACKENDS)


def backend_named(scheduler: str) -> Backend | None:
    """The backend that registers as ``scheduler``; None: none of ours."""
    return next((backend for backend in BACKENDS if backend.scheduler == scheduler), None)


def entry_point_lines() -> list[str]:
    """Each backend as a line of an ``entry_points.txt`` group: ``name = module:create_scheduler``."""
    return [f"{backend.scheduler} = {backend.factory}" for backend in BACKENDS]

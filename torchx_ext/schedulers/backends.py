"""The scheduler backends, listed once. Registration on both torchx lines reads this list (torchx
0.7.0's entry points, ``registration/metadata.py``; torchx-nightly's plugins,
``torchx_plugins/schedulers``), and so do the test suites' parametrizations. Adding a backend:
docs/layout.md.

Nothing imported, not even ``dataclasses``: torchx reads the registration on every command.
"""

from __future__ import annotations


class Backend:
    """One backend: the torchx scheduler name it registers under, and its package."""

    __slots__ = ("scheduler", "package", "torchx_builtin")

    def __init__(self, scheduler: str, package: str, torchx_builtin: str | None) -> None:
        self.scheduler = scheduler
        self.package = package
        """Its subpackage of ``torchx_ext.schedulers``, whose ``create_scheduler`` torchx calls."""
        self.torchx_builtin = torchx_builtin
        """The module of the torchx builtin whose name it takes (and whose options and meanings it keeps)."""

    @property
    def module(self) -> str:
        """Its package's module name, whose ``create_scheduler`` torchx calls."""
        return f"torchx_ext.schedulers.{self.package}"

    @property
    def factory(self) -> str:
        """The entry point's value: ``module:create_scheduler``."""
        return f"{self.module}:create_scheduler"


BACKENDS = (  # the first is the default of `torchx run`
    Backend("local_cwd", "local", "torchx.schedulers.local_scheduler"),
    Backend("local_docker", "docker", "torchx.schedulers.docker_scheduler"),
    Backend("kubernetes", "kubernetes", "torchx.schedulers.kubernetes_scheduler"),
    Backend("slurm", "slurm", "torchx.schedulers.slurm_scheduler"),
)
SCHEDULERS = tuple(backend.scheduler for backend in BACKENDS)


def entry_point_lines() -> list[str]:
    """Each backend as a line of an ``entry_points.txt`` group: ``name = module:create_scheduler``."""
    return [f"{backend.scheduler} = {backend.factory}" for backend in BACKENDS]

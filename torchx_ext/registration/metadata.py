"""Publishes the entry points that only one torchx line may see, where that line is installed.

``torchx_ext_registration.pth`` calls :func:`install` at interpreter start. It adds a meta path
finder that finds no modules. When a program reads the installed distributions on sys.path
(torchx reads its plugins' entry points that way, through ``importlib.metadata`` or
``importlib_metadata``), it answers with one more distribution, made of one of this package's
directories:

- ``torchx_0_7_0/`` (``torchx-ext-for-torchx-0.7.0``) where the installed torchx replaces its
  builtin schedulers with the registered ones (0.7.0): our schedulers and named resources,
  and 0.7.0's own schedulers again;
- ``torchx_nightly/`` (``torchx-ext-for-torchx-nightly``) where it adds plugins to its builtins
  (nightly): the CLI commands only nightly has;
- nothing where torchx is not installed.

Every Python process of the environment runs :func:`install`, so it imports nothing; the line
is looked up once per process, on the first read.
"""

from __future__ import annotations

import os
import sys

# Not typing.TYPE_CHECKING: importing typing costs every interpreter ~10 ms at start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from importlib.metadata import Distribution, DistributionFinder

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHX_0_7_0 = "torchx-ext-for-torchx-0.7.0"
TORCHX_NIGHTLY = "torchx-ext-for-torchx-nightly"
DIRECTORIES = {TORCHX_0_7_0: os.path.join(HERE, "torchx_0_7_0"), TORCHX_NIGHTLY: os.path.join(HERE, "torchx_nightly")}


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


class TorchxLineEntryPoints:
    """A meta path finder that finds no modules, only the installed torchx line's distribution."""

    def __init__(self) -> None:
        self._published: str | None = None
        self._decided = False
        self._deciding = False

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        return None

    def find_distributions(self, context: DistributionFinder.Context | None = None) -> Iterable[Distribution]:
        # The distribution lies in no sys.path entry: a search of given locations (pip's, one
        # entry at a time) does not find it, so pip list and pip freeze do not show it.
        if context is not None and context.path is not sys.path:
            return ()
        name = getattr(context, "name", None)
        published = self.published()
        if published is None or (name is not None and _normalized(name) != _normalized(published)):
            return ()
        from importlib.metadata import PathDistribution
        from pathlib import Path

        return (PathDistribution(Path(DIRECTORIES[published])),)

    def published(self) -> str | None:
        """The name of the distribution this finder adds, or None (no torchx installed)."""
        if not self._decided:
            if self._deciding:  # asked again while looking torchx up: it seeks another name
                return None
            self._deciding = True
            try:
                from torchx_ext.registration.lines import installed_torchx

                line = installed_torchx()
                if line is not None:
                    self._published = TORCHX_NIGHTLY if line.adds_plugins_to_builtins else TORCHX_0_7_0
                self._decided = True
            finally:
                self._deciding = False
        return self._published


def install() -> None:
    """Adds the finder to ``sys.meta_path`` once; finders already there keep precedence."""
    if not any(isinstance(finder, TorchxLineEntryPoints) for finder in sys.meta_path):
        sys.meta_path.append(TorchxLineEntryPoints())

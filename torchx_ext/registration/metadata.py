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
    from pathlib import Path
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
        self._distribution: Distribution | None = None

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
        if self._distribution is None:
            self._distribution = _read_once(DIRECTORIES[published])
        return (self._distribution,)

    def published(self) -> str | None:
        """The name of the distribution this finder adds, or None (no torchx installed)."""
        if not self._decided:
            if self._deciding:  # asked again while looking torchx up: it seeks another name
                return None
            self._deciding = True
            try:
                # Only the torchx package's files, not lines.installed_torchx(): that reads
                # distribution metadata, which cost every torchx command ~20 ms here.
                package = torchx_package_dir()
                if package is not None:
                    nightly = (package / "plugins" / "__init__.py").is_file()
                    self._published = TORCHX_NIGHTLY if nightly else TORCHX_0_7_0
                self._decided = True
            finally:
                self._deciding = False
        return self._published


def _read_once(directory: str) -> Distribution:
    """The distribution made of ``directory``, each of its files read once per process: torchx
    reads entry points dozens of times per command (its component finder, once a function).

    A ``Distribution`` of its own, not a ``PathDistribution``: importlib_metadata (which torchx
    0.7.0 reads) passes such a one through, where it would read a ``PathDistribution``'s
    directory again by itself, past ``read_text``.
    """
    from importlib.metadata import Distribution
    from pathlib import Path

    class ReadOnce(Distribution):
        _texts: dict[str, str | None] = {}

        def read_text(self, filename: str | os.PathLike[str]) -> str | None:
            key = os.fspath(filename)
            if key not in self._texts:
                try:
                    text: str | None = Path(directory, key).read_text(encoding="utf-8")
                except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
                    text = None
                self._texts[key] = _with_our_schedulers(text) if key == "entry_points.txt" else text
            return self._texts[key]

        def locate_file(self, path: str | os.PathLike[str]) -> Path:
            return Path(directory, path)

    return ReadOnce()


def _with_our_schedulers(text: str | None) -> str | None:
    """``entry_points.txt`` with our schedulers first in its ``[torchx.schedulers]`` group (torchx
    0.7.0's), from the one list of backends; a file without that group, as it is."""
    header = "[torchx.schedulers]\n"
    if text is None or header not in text:
        return text
    from torchx_ext.schedulers.backends import entry_point_lines

    return text.replace(header, header + "".join(f"{line}\n" for line in entry_point_lines()), 1)


def torchx_package_dir() -> Path | None:
    """Where the ``torchx`` import package is, or None when there is none (nothing imported)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("torchx")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def install() -> None:
    """Adds the finder to ``sys.meta_path`` once; finders already there keep precedence."""
    if not any(isinstance(finder, TorchxLineEntryPoints) for finder in sys.meta_path):
        sys.meta_path.append(TorchxLineEntryPoints())

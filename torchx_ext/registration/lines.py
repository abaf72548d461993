"""Which torchx line is installed, found without importing torchx.

Importing torchx reads entry points (``torchx.version``), so code that runs while entry points
are being read (``metadata.py``) must not import it; these functions only look at files.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchx_ext.registration.metadata import torchx_package_dir

RELEASE = "torchx"
"""The distribution of torchx's releases (0.7.0 is the last)."""
NIGHTLY = "torchx-nightly"
"""The distribution of torchx's nightly builds; the same ``torchx`` import package."""
INSTALL_HINT = (
    "install torchx first: `pip install 'torchx_ext[torchx]'` (torchx 0.7.0) or "
    "`pip install torchx-nightly` before torchx_ext"
)


@dataclass(frozen=True)
class TorchxLine:
    distribution: str
    """``torchx`` or ``torchx-nightly``."""
    version: str
    adds_plugins_to_builtins: bool
    """Whether the installed torchx keeps its builtin schedulers when plugins register more
    (nightly's ``torchx.plugins``); torchx 0.7.0 replaces them with the registered group."""

    @property
    def name(self) -> str:
        """``0.7.0`` or ``nightly``: the line, as scripts/test.sh --line names it."""
        return "nightly" if self.distribution == NIGHTLY else self.version


def installed_torchx() -> TorchxLine | None:
    """The installed torchx line, or None when neither distribution is installed."""
    from importlib import metadata

    package = torchx_package_dir()
    if package is None:
        return None
    for distribution in (NIGHTLY, RELEASE):
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
        return TorchxLine(distribution, version, (package / "plugins" / "__init__.py").is_file())
    return None


def require_torchx() -> TorchxLine:
    """The installed torchx line; an ImportError that says what to install when there is none."""
    line = installed_torchx()
    if line is None:
        raise ImportError(f"torchx_ext's torchx plugins need torchx, which is not installed: {INSTALL_HINT}")
    return line

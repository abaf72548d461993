"""local_cwd's check of what each replica will run, made before anything is recorded or started:
its replicas run in the submitting shell's directory with torchx's own interpreter, so a script
or module they would not find is known here already (and would otherwise fail seconds later)."""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Mapping

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.role_metadata import target_of


def check_targets(app: specs.AppDef, cwd: str, environ: Mapping[str, str]) -> None:
    for role in app.roles:
        check_target(role, cwd, role.env.get("PYTHONPATH", environ.get("PYTHONPATH", "")))


def check_target(role: specs.Role, cwd: str, pythonpath: str) -> None:
    """Refuse, before anything is recorded or started, a script or module that the replica (in
    ``cwd``, with torchx's own interpreter) would not find."""
    target = target_of(role.metadata)
    if target is None:
        return
    kind, name = target
    if kind == "script":
        if not os.path.isfile(os.path.join(cwd, name)):
            raise InvalidArgumentError(
                f"script {name!r} of role {role.name!r} does not exist (relative to {cwd}): "
                "give the path of a Python file, or -m MODULE")
        return
    if not _importable(name, [cwd, *(part for part in pythonpath.split(os.pathsep) if part), *sys.path[1:]]):
        raise InvalidArgumentError(
            f"module {name!r} of role {role.name!r} cannot be imported from {cwd}: "
            "give a module on the Python path or in that directory, or --script PATH")


def _importable(name: str, search: list[str]) -> bool:
    """Whether ``import name`` would find it, each package on the way included; imports nothing.
    Below a plain module (``os.path``) it cannot tell without importing, so it says yes."""
    parts = name.split(".")
    if not all(parts):
        return False
    if parts[0] in sys.builtin_module_names:
        return len(parts) == 1
    locations: list[str] | None = search
    for part in parts:
        if locations is None:
            return True
        spec = importlib.machinery.PathFinder.find_spec(part, locations)
        if spec is None:
            return False
        locations = list(spec.submodule_search_locations) if spec.submodule_search_locations is not None else None
    return True

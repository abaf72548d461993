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
    top_level = name.partition(".")[0]
    search = [cwd, *(part for part in pythonpath.split(os.pathsep) if part), *sys.path[1:]]
    found = top_level in sys.builtin_module_names or importlib.machinery.PathFinder.find_spec(top_level, search)
    if not found:
        raise InvalidArgumentError(
            f"module {name!r} of role {role.name!r} cannot be imported from {cwd}: "
            "give a module on the Python path or in that directory, or --script PATH")

"""``--help`` of our components as a user reads it, and their booleans as bare flags.

torchx builds a component's parser from its signature and shows every boolean as a value
(``--numa_strict str``, default ``False``) and the script's arguments as ``(required)``, which
they are not. The help here comes from the same signature and docstring; torchx still parses
the arguments, after ``with_bare_flags`` has given each bare boolean flag its value.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from torchx.specs.file_linter import get_fn_docstring

from torchx_ext.components.dist import ddp, spmd

OUR_COMPONENTS: dict[str, Callable[..., Any]] = {"dist.ddp": ddp, "dist.spmd": spmd}

_METAVARS = {"m": "MODULE", "h": "RESOURCE", "j": "[MIN:]NODESxPROCS", "env": "KEY=VALUE,...", "mounts": "MOUNT,..."}
_BOOLEAN_VALUES = ("true", "false")


def boolean_flags(component: str) -> list[str]:
    parameters = inspect.signature(OUR_COMPONENTS[component]).parameters.values()
    return [f"--{parameter.name}" for parameter in parameters if isinstance(parameter.default, bool)]


def with_bare_flags(component: str, args: Sequence[str]) -> list[str]:
    """``args`` with each bare boolean flag (``--numa_strict`` not followed by true or false)
    given the value torchx's parser needs; arguments after ``--`` are the script's, untouched."""
    flags = boolean_flags(component)
    end = args.index("--") if "--" in args else len(args)
    result = list(args[end:])
    for position in reversed(range(end)):
        word = args[position]
        following = args[position + 1] if position + 1 < end else None
        bare = word in flags and (following is None or following.lower() not in _BOOLEAN_VALUES)
        result.insert(0, f"{word}=True" if bare else word)
    return result


def component_help(component: str) -> str:
    fn = OUR_COMPONENTS[component]
    description, parameter_help = get_fn_docstring(fn)
    parser = argparse.ArgumentParser(
        prog=f"torchx run [-s SCHEDULER] {component}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    parser.add_argument("--help", action="help", help="show this help message and exit")
    for parameter in inspect.signature(fn).parameters.values():
        text = parameter_help.get(parameter.name, "")
        if parameter.kind == inspect.Parameter.VAR_POSITIONAL:
            parser.add_argument(
                "ARG", nargs="*",
                help=f"{text} (optional; put them after -- when the first one starts with -)")
            continue
        names = [f"-{parameter.name}", f"--{parameter.name}"] if len(parameter.name) == 1 else [f"--{parameter.name}"]
        if isinstance(parameter.default, bool):
            state = "on" if parameter.default else "off"
            parser.add_argument(*names, action="store_true", help=f"{text} (a flag; default: {state})")
            continue
        default = "" if parameter.default is None else f" (default: {parameter.default})"
        parser.add_argument(*names, metavar=_METAVARS.get(parameter.name, parameter.name.upper()),
                            help=f"{text}{default}")
    return parser.format_help().rstrip("\n")

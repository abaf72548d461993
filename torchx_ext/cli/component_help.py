"""``--help`` of our components as a user reads it, and their booleans as bare flags.

torchx builds a component's parser from its signature and shows every boolean as a value
(``--numa_strict str``, default ``False``) and the script's arguments as ``(required)``, which
they are not. The help here comes from the same signature and docstring; torchx still parses
the arguments, after ``checked_component_args`` has checked them and given each bare boolean
flag its value.
"""

from __future__ import annotations

import argparse
import inspect
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from torchx.specs.file_linter import get_fn_docstring

from torchx_ext.components.dist import ddp, spmd
from torchx_ext.errors import InvalidArgumentError

OUR_COMPONENTS: dict[str, Callable[..., Any]] = {"dist.ddp": ddp, "dist.spmd": spmd}

_METAVARS = {"m": "MODULE", "h": "RESOURCE", "j": "[MIN:]NODESxPROCS", "env": "KEY=VALUE,...", "mounts": "MOUNT,..."}
_BOOLEAN_VALUES = ("true", "false")
_BARE: Any = object()
"""A boolean flag given alone."""


def boolean_flags(component: str) -> list[str]:
    parameters = inspect.signature(OUR_COMPONENTS[component]).parameters.values()
    return [f"--{parameter.name}" for parameter in parameters if isinstance(parameter.default, bool)]


def component_help(component: str) -> str:
    return _parser(component, for_help=True).format_help().rstrip("\n")


@dataclass(frozen=True)
class ComponentArgs:
    args: list[str]
    """As torchx's parser of the component needs them."""
    wants_help: bool
    """``--help`` came before the script's first argument (after it, it is the script's)."""


def checked_component_args(component: str, args: Sequence[str]) -> ComponentArgs:
    """``args`` with each bare boolean flag (``--numa_strict`` alone) given the value torchx's
    parser needs, and the script's arguments (from the first word that is not an option on, as
    torchx takes them) untouched. Raises InvalidArgumentError, in one line, for what torchx
    would refuse with its usage text (an unknown flag, a flag without its value) or silently
    read as false (a boolean given anything but true or false)."""
    try:
        parsed = _parser(component, for_help=False).parse_args(list(args))
    except _RefusedError as error:
        raise InvalidArgumentError(
            f"{component}: {error} (`torchx run {component} --help` lists its parameters)") from None
    for flag in boolean_flags(component):
        value = getattr(parsed, flag[2:])
        if value is not None and value is not _BARE and value.lower() not in _BOOLEAN_VALUES:
            raise InvalidArgumentError(
                f"{component}: {flag} {value!r}: {flag} is a flag: give it alone, or followed by true or false")
    end = len(args) - len(parsed.ARG)
    flags = boolean_flags(component)
    options = [f"{word}=True" if word in flags and getattr(parsed, word[2:]) is _BARE else word for word in args[:end]]
    return ComponentArgs([*options, *args[end:]], wants_help=bool(parsed.help))


class _RefusedError(Exception):
    pass


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _RefusedError(message)


def _parser(component: str, for_help: bool) -> argparse.ArgumentParser:
    """The component's parameters as a user gives them: booleans are flags (for parsing, they
    still take torchx's true or false); the script's arguments are everything after the first
    one that is not an option, as torchx takes them."""
    fn = OUR_COMPONENTS[component]
    description, parameter_help = get_fn_docstring(fn)
    parser = (argparse.ArgumentParser if for_help else _RaisingParser)(
        prog=f"torchx run [-s SCHEDULER] {component}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    if for_help:
        parser.add_argument("--help", action="help", help="show this help message and exit")
    else:
        parser.add_argument("--help", action="store_true")
    for parameter in inspect.signature(fn).parameters.values():
        text = parameter_help.get(parameter.name, "")
        if parameter.kind == inspect.Parameter.VAR_POSITIONAL:
            parser.add_argument(
                "ARG", nargs="*" if for_help else argparse.REMAINDER,
                help=f"{text} (optional; put them after -- when the first one starts with -)")
            continue
        names = [f"-{parameter.name}", f"--{parameter.name}"] if len(parameter.name) == 1 else [f"--{parameter.name}"]
        if isinstance(parameter.default, bool):
            state = "on" if parameter.default else "off"
            if for_help:
                parser.add_argument(*names, action="store_true", help=f"{text} (a flag; default: {state})")
            else:
                parser.add_argument(*names, nargs="?", const=_BARE)
            continue
        default = "" if parameter.default is None else f" (default: {parameter.default})"
        parser.add_argument(*names, metavar=_METAVARS.get(parameter.name, parameter.name.upper()),
                            help=f"{text}{default}")
    return parser

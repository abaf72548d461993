"""Checks of the torchrun values both launcher entries take (the CLI's flags, ``launch``'s
parameters): torch decides what is valid, these turn its refusals into one clear
InvalidArgumentError that names the value and the valid forms, before anything starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

from torchx_ext.errors import InvalidArgumentError

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing import Std

    StdSpec = Union[str, Std, Mapping[int, Std]]
else:
    StdSpec = Any

NPROC_PER_NODE_FORMS = "a positive integer, auto, cpu, gpu, xpu, or the name of a registered accelerator backend"
STD_FORMS = "0 (none), 1 (stdout), 2 (stderr), 3 (both), or one of these per local rank such as 0:1,1:2"


def local_world_size(value: str, name: str = "--nproc-per-node") -> int:
    """``--nproc-per-node`` as torchrun reads it: torch decides which values it takes (they
    grow with torch: xpu, a renamed PrivateUse1 backend); we only say clearly what went wrong."""
    import torch
    from torch.distributed.run import determine_local_world_size

    try:
        nproc = determine_local_world_size(value)
    except (ValueError, RuntimeError) as error:
        # torch's message says why (e.g. "Xpu is not available."); its first line is enough,
        # except for a backend name with no module behind it, where it explains the plugin API.
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
        if value == privateuse1_name() and getattr(torch, value, None) is None:
            reason = "no accelerator backend is registered under that name"
        raise InvalidArgumentError(f"invalid {name} {value!r} ({reason}): expected {NPROC_PER_NODE_FORMS}") from error
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        # torch takes any integer, 0 and negatives included, and fails later or starts no worker.
        raise InvalidArgumentError(f"invalid {name} {value!r}: expected {NPROC_PER_NODE_FORMS}")
    return nproc


def privateuse1_name() -> str:
    # The name a backend plugin gave torch's PrivateUse1 device (rename_privateuse1_backend).
    import torch

    return str(getattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")())


def check_rdzv_backend(backend: str, name: str = "--rdzv-backend") -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    known = sorted(rendezvous_handler_registry._registry)  # the registry lists no names publicly
    if backend not in known:
        raise InvalidArgumentError(f"unknown {name} {backend!r}: valid values are {', '.join(known)}")


def std_spec(value: StdSpec, name: str) -> Any:
    """A ``--redirects``/``--tee`` value as LogsSpecs takes it: a Std or {local_rank: Std}.
    Flags take torchrun's text; ``launch`` parameters also a Std or a {local_rank: Std} dict."""
    from torch.distributed.elastic.multiprocessing import Std

    forms = STD_FORMS if name.startswith("--") else f"{STD_FORMS} (a string), a Std, or a {{local_rank: Std}} dict"
    if isinstance(value, Std):
        return value
    if isinstance(value, str):
        try:
            return Std.from_str(value)
        except ValueError as error:
            raise InvalidArgumentError(f"invalid {name} {value!r}: expected {forms}") from error
    if isinstance(value, Mapping) and all(
        isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 and isinstance(std, Std)
        for rank, std in value.items()
    ):
        return dict(value)
    raise InvalidArgumentError(f"invalid {name} {value!r}: expected {forms}")

"""Checks of what every backend is given (a role's image, seconds in ``-cfg``, /dev/shm sizes),
with one message each, made before anything is built or started."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torchx import specs

from torchx_ext.errors import InvalidArgumentError

DEFAULT_SHM_NO_LIMIT_MB = 2048
"""/dev/shm of a replica with no memory limit."""


def check_image(role: specs.Role, hint: str = "") -> None:
    """A role run as a container needs an image; ``hint`` says what kind (appended in parentheses)."""
    if not role.image:
        raise InvalidArgumentError(f"role {role.name!r} has no image: give one with --image" + (f" ({hint})" if hint else ""))


def seconds_option(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """``cfg[key]`` as whole seconds, 0 or more; ``default`` where it is not given (None: required)."""
    value = cfg.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"invalid {key} {value!r}: expected seconds, 0 or more")
    return value


def shm_mb(shm_size: str, memory_mb: int | None, parse_mb: Callable[[str, str], int], limit_of: str) -> int:
    """The /dev/shm size for ``-cfg shm_size`` (``auto`` or a size ``parse_mb`` reads) under a
    memory limit of ``memory_mb`` (None: none); ``limit_of`` names whose limit it is."""
    # /dev/shm is memory-backed and its pages count against the limit, so it can never usefully
    # exceed it; half of it leaves the processes the other half.
    if shm_size.strip().lower() == "auto":
        return max(64, memory_mb // 2) if memory_mb else DEFAULT_SHM_NO_LIMIT_MB
    size = parse_mb(shm_size, "shm_size")
    if memory_mb is not None and size > memory_mb:
        raise InvalidArgumentError(
            f"shm_size {shm_size!r} ({size} MiB) is more than {limit_of} memory limit ({memory_mb} MiB), "
            "which /dev/shm counts against: give a smaller shm_size, 'auto', or more memMB")
    return size

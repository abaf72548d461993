"""Topology -> binding plan -> CPU affinity. No torch import, no side effects at import.

Names are loaded on first use, so that a worker importing only ``torchx_ext.numa.bind``
pays for nothing else.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False
if TYPE_CHECKING:
    from torchx_ext.numa.cpulist import format_cpulist, parse_cpulist
    from torchx_ext.numa.plan import (
        BindingPlan,
        RankBinding,
        parse_visible_devices,
        plan_binding,
        visible_devices_from_env,
    )
    from torchx_ext.numa.topology import Cpu, Gpu, NumaNode, Topology, read_topology
    from torchx_ext.options import MODES

_EXPORTS = {
    "format_cpulist": "torchx_ext.numa.cpulist",
    "parse_cpulist": "torchx_ext.numa.cpulist",
    "MODES": "torchx_ext.options",
    "BindingPlan": "torchx_ext.numa.plan",
    "RankBinding": "torchx_ext.numa.plan",
    "parse_visible_devices": "torchx_ext.numa.plan",
    "plan_binding": "torchx_ext.numa.plan",
    "visible_devices_from_env": "torchx_ext.numa.plan",
    "Cpu": "torchx_ext.numa.topology",
    "Gpu": "torchx_ext.numa.topology",
    "NumaNode": "torchx_ext.numa.topology",
    "Topology": "torchx_ext.numa.topology",
    "read_topology": "torchx_ext.numa.topology",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

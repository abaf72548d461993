"""Topology -> binding plan -> CPU affinity. No torch import, no side effects at import."""

from torchx_ext.numa.cpulist import format_cpulist, parse_cpulist
from torchx_ext.numa.plan import (
    MODES,
    BindingPlan,
    RankBinding,
    parse_visible_devices,
    plan_binding,
    visible_devices_from_env,
)
from torchx_ext.numa.topology import Cpu, Gpu, NumaNode, Topology, read_topology

__all__ = [
    "MODES",
    "BindingPlan",
    "Cpu",
    "Gpu",
    "NumaNode",
    "RankBinding",
    "Topology",
    "format_cpulist",
    "parse_cpulist",
    "parse_visible_devices",
    "plan_binding",
    "read_topology",
    "visible_devices_from_env",
]

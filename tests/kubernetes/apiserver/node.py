"""The single node: its labels and allocatable resources, the scheduler's fit check, and the static
CPU manager with the Topology Manager's single-numa-node policy for Guaranteed pods."""

from __future__ import annotations

import os
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.kubernetes.apiserver.quantities import parse_quantity
from tests.kubernetes.apiserver.resources import Obj, qos_class

NODE_NAME = "node-0"
DEFAULT_LABELS = {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux"}


def parse_cpulist(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def host_numa_nodes() -> list[list[int]]:
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    found = [parse_cpulist((node / "cpulist").read_text()) for node in nodes if (node / "cpulist").exists()]
    found = [cpus for cpus in found if cpus]
    return found or [list(range(os.cpu_count() or 1))]


def host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 2**30


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """Summed container requests; a limit without a request counts as the request, as defaulting does."""
    total: dict[str, Decimal] = {}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    return total


def exclusive_cpu_count(pod: Obj) -> int:
    """CPUs the static CPU manager pins: Guaranteed pods' integer CPU containers (0 otherwise)."""
    if qos_class(pod["spec"]) != "Guaranteed":
        return 0
    count = 0
    for container in pod["spec"].get("containers") or []:
        cpu = parse_quantity(((container.get("resources") or {}).get("limits") or {}).get("cpu", "0"))
        if cpu == cpu.to_integral_value():
            count += int(cpu)
    return count


class TopologyError(Exception):
    pass


class Node:
    def __init__(self, labels: dict[str, str] | None = None, allocatable: dict[str, Any] | None = None,
                 numa_nodes: list[list[int]] | None = None, topology_policy: str = "none") -> None:
        self.labels = dict(DEFAULT_LABELS if labels is None else labels)
        self.numa_nodes = numa_nodes if numa_nodes is not None else host_numa_nodes()
        given = dict(allocatable or {})
        self.allocatable: dict[str, Decimal] = {"cpu": Decimal(os.cpu_count() or 1), "memory": Decimal(host_memory()),
                                                "pods": Decimal(110)}
        self.allocatable.update({name: parse_quantity(value) for name, value in given.items()})
        self.topology_policy = topology_policy
        self._lock = threading.Lock()
        self._assigned: dict[str, list[int]] = {}  # pod uid -> its exclusive CPUs

    def unschedulable_reason(self, pod: Obj, others: list[Obj]) -> str | None:
        """Why the pod cannot go on this node given the non-terminal pods already there, or None."""
        selector = pod["spec"].get("nodeSelector") or {}
        if any(self.labels.get(key) != value for key, value in selector.items()):
            return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        used: dict[str, Decimal] = {"pods": Decimal(len(others))}
        for other in others:
            for name, value in pod_requests(other).items():
                used[name] = used.get(name, Decimal(0)) + value
        wanted = pod_requests(pod)
        wanted["pods"] = Decimal(1)
        short = [name for name, value in sorted(wanted.items())
                 if value > 0 and used.get(name, Decimal(0)) + value > self.allocatable.get(name, Decimal(0))]
        if short:
            return "0/1 nodes are available: " + ", ".join(f"1 Insufficient {name}" for name in short) + "."
        return None

    def allocate(self, uid: str, count: int) -> list[int]:
        """Exclusive CPUs for a pod: from one NUMA node when one can hold them (the fullest that can,
        to keep whole nodes free); else spread, unless the policy is single-numa-node."""
        with self._lock:
            if uid in self._assigned:
                return self._assigned[uid]
            taken = {cpu for cpus in self._assigned.values() for cpu in cpus}
            free = [[cpu for cpu in cpus if cpu not in taken] for cpus in self.numa_nodes]
            fitting = [cpus for cpus in free if len(cpus) >= count]
            if fitting:
                chosen = min(fitting, key=len)[:count]
            elif self.topology_policy == "single-numa-node":
                raise TopologyError("Resources cannot be allocated with Topology locality")
            else:
                spread = [cpu for cpus in free for cpu in cpus]
                if len(spread) < count:
                    raise TopologyError(f"Not enough cpus available to satisfy request: requested={count}, "
                                        f"available={len(spread)}")
                chosen = spread[:count]
            self._assigned[uid] = chosen
            return chosen

    def release(self, uid: str) -> None:
        with self._lock:
            self._assigned.pop(uid, None)

    def cpus_of(self, uid: str) -> list[int]:
        with self._lock:
            return list(self._assigned.get(uid, []))

    def numa_of(self, cpus: list[int]) -> list[int]:
        return sorted({index for index, node in enumerate(self.numa_nodes) if set(cpus) & set(node)})

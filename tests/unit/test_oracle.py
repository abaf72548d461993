"""The planner against torch 2.13's torch.numa.binding on the same fixture machines.

Wherever torch computes a CPU set, ours must be the same; where torch fails, ours must
still give every rank CPUs, and say which fallback it took.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.fixtures.machines import GPU_MACHINES
from tests.torch_oracle import torch_binding
from tests.conftest import MachineRoot
from torchx_ext.numa.plan import plan_binding
from torchx_ext.numa.topology import Topology

GPU_MODES = ["node", "socket", "exclusive", "core-complex"]


def visible_sets(gpu_count: int) -> list[tuple[int, ...]]:
    everything = tuple(range(gpu_count))
    upper_half_reversed = tuple(reversed(range(gpu_count // 2, gpu_count)))
    return [everything, upper_half_reversed or everything, (gpu_count - 1,)]


@pytest.mark.parametrize("mode", GPU_MODES)
@pytest.mark.parametrize("name", GPU_MACHINES)
def test_gpu_plans_equal_torch_wherever_torch_succeeds(
    name: str, mode: str, machine_root: MachineRoot, machine_topology: Callable[[str], Topology]
) -> None:
    topology = machine_topology(name)
    compared = 0
    for visible in visible_sets(len(topology.gpus)):
        plan = plan_binding(topology, len(visible), mode, visible_devices=visible)
        pci = [topology.gpus[index].pci_address for index in visible]
        with torch_binding(machine_root(name), topology.allowed, pci) as torch_plan:
            for rank in plan.ranks:
                expected = torch_plan.cpus(rank.local_rank, mode)
                assert rank.cpus, f"rank {rank.local_rank} got no CPU"
                if isinstance(expected, Exception):
                    continue
                assert rank.cpus == expected, (visible, rank.local_rank)
                compared += 1
    assert (compared == 0) == ((name, mode) in TORCH_ALWAYS_FAILS), compared


# torch 2.13 raises for every rank here: socket mode takes min() of each node's allowed CPUs,
# which is empty on memory-only nodes and on nodes outside the cpuset.
TORCH_ALWAYS_FAILS = {
    ("gh200", "socket"),
    ("gb200", "socket"),
    ("dgx-h100-node1-cpuset", "socket"),
    ("dgx-h100-2cores", "socket"),
    ("dgx-h100-no-cpu0", "socket"),
    ("epyc-nps4-uneven", "socket"),
    ("epyc-nps4-no-node0", "socket"),
    # Node 4 is listed in `possible` but has no directory.
    ("sparse-node-ids", "socket"),
    # Two physical cores on node 0 for GPUs 0-3, none on node 1 for GPUs 4-7.
    ("dgx-h100-2cores", "exclusive"),
    # Every GPU reports a memory-only node: torch finds no CPU for any of them.
    ("gb200-gpu-memory-nodes", "node"),
    ("gb200-gpu-memory-nodes", "socket"),
    ("gb200-gpu-memory-nodes", "exclusive"),
    ("gb200-gpu-memory-nodes", "core-complex"),
}


@pytest.mark.parametrize("name", GPU_MACHINES)
def test_torch_fails_where_we_fall_back(
    name: str, machine_root: MachineRoot, machine_topology: Callable[[str], Topology]
) -> None:
    """Every torch failure outside socket mode is a case the planner reports as a fallback."""
    topology = machine_topology(name)
    pci = [gpu.pci_address for gpu in topology.gpus]
    for mode in ["node", "exclusive", "core-complex"]:
        plan = plan_binding(topology, len(pci), mode)
        with torch_binding(machine_root(name), topology.allowed, pci) as torch_plan:
            failed = [rank.local_rank for rank in plan.ranks if isinstance(torch_plan.cpus(rank.local_rank, mode), Exception)]
        if failed:
            assert plan.warnings, (mode, failed)

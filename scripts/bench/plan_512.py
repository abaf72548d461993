"""Time reading the topology and planning on a 512-CPU, 16-node, 16-GPU machine (a fake sysfs).

Target: read + plan under 20 ms together. For scale, the same 16 ranks are also planned by
torch 2.13's torch.numa.binding (run on the same tree, as tests/torch_oracle.py does), and
the ratio ours/torch is printed.

    .venv/bin/python scripts/bench/plan_512.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fixtures.fake_sysfs import write_sysfs  # noqa: E402
from torchx_ext.numa.machine import MachineSpec  # noqa: E402
from torchx_ext.numa.plan import plan_binding  # noqa: E402
from torchx_ext.numa.topology import ALL_ONLINE, read_topology  # noqa: E402

MACHINE = MachineSpec(
    sockets=2, nodes_per_socket=8, cores_per_node=16, threads_per_core=2, cores_per_llc=8, gpu_nodes=tuple(range(16))
)
MODES = ["node", "socket", "exclusive", "core-complex"]
TARGET_MS = 20.0


def median_ms(action: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch.numa.binding comparison")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = write_sysfs(MACHINE, directory)
        topology = read_topology(root, ALL_ONLINE)
        assert len(topology.allowed) == 512 and len(topology.nodes) == 16 and len(topology.gpus) == 16
        read_ms = median_ms(lambda: read_topology(root, ALL_ONLINE), args.repeats)
        print(f"machine: 512 CPUs, 16 NUMA nodes, 16 GPUs; median of {args.repeats} runs")
        print(f"read_topology: {read_ms:.2f} ms")
        worst = 0.0
        for mode in MODES:
            plan_ms = median_ms(lambda: plan_binding(topology, 16, mode), args.repeats)
            total = median_ms(lambda: plan_binding(read_topology(root, ALL_ONLINE), 16, mode), args.repeats)
            worst = max(worst, total)
            line = f"{mode:>12}: plan {plan_ms:.2f} ms, read+plan {total:.2f} ms"
            if not args.no_torch:
                torch_ms = median_ms(lambda: torch_plan(root, topology, mode), max(3, args.repeats // 5))
                line += f"; torch.numa.binding for 16 ranks {torch_ms:.2f} ms, ratio ours/torch {total / torch_ms:.2f}"
            print(line)
    verdict = "met" if worst < TARGET_MS else "MISSED"
    print(f"target read+plan < {TARGET_MS:.0f} ms: {verdict} (worst mode {worst:.2f} ms)")
    return 0 if worst < TARGET_MS else 1


def torch_plan(root: Path, topology: object, mode: str) -> None:
    from tests.torch_oracle import torch_binding
    from torchx_ext.numa.topology import Topology

    assert isinstance(topology, Topology)
    pci = [gpu.pci_address for gpu in topology.gpus]
    with torch_binding(root, topology.allowed, pci) as oracle:
        for rank in range(16):
            result = oracle.cpus(rank, mode)
            assert not isinstance(result, Exception), result


if __name__ == "__main__":
    sys.exit(main())

"""torch 2.13's own torch.numa.binding, run against a fake sysfs root: the planner's oracle.

torch reads /sys, asks CUDA for each GPU's PCI address and its thread affinity, and checks
for numactl. Inside ``torch_binding`` those four come from the fixture instead; everything
else is torch's code unchanged.
"""

from __future__ import annotations

import builtins
import os
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch.numa.binding as binding


class TorchBinding:
    def __init__(self, root: Path, allowed: frozenset[int], visible_pci: Sequence[str]) -> None:
        self.root = root
        self.allowed = allowed
        self.visible_pci = list(visible_pci)

    def cpus(self, gpu_index: int, mode: str) -> frozenset[int] | Exception:
        """What torch binds local rank ``gpu_index`` to, or the exception torch raises."""
        options = binding.NumaOptions(affinity_mode=binding.AffinityMode(mode))
        try:
            return frozenset(binding._get_validated_logical_cpus_to_bind_to(gpu_index=gpu_index, numa_options=options))
        except Exception as error:  # torch's failure is a result here, not a test error
            return error

    def _path(self, path: Any) -> Any:
        text = os.fspath(path)
        return str(self.root / text[len("/sys/"):]) if text.startswith("/sys/") else path

    def _device_properties(self, index: int) -> types.SimpleNamespace:
        domain, bus, slot_function = self.visible_pci[index].split(":")
        return types.SimpleNamespace(
            pci_domain_id=int(domain, 16), pci_bus_id=int(bus, 16), pci_device_id=int(slot_function.split(".")[0], 16)
        )


@contextmanager
def torch_binding(root: Path, allowed: frozenset[int], visible_pci: Sequence[str]) -> Iterator[TorchBinding]:
    oracle = TorchBinding(root, allowed, visible_pci)
    fake_os = types.SimpleNamespace(
        listdir=lambda path: os.listdir(oracle._path(path)),
        path=os.path,
        sched_getaffinity=lambda pid: set(oracle.allowed),
    )
    fake_torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            device_count=lambda: len(oracle.visible_pci), get_device_properties=oracle._device_properties
        )
    )
    replacements = {
        "open": lambda path, *args, **kwargs: builtins.open(oracle._path(path), *args, **kwargs),
        "os": fake_os,
        "torch": fake_torch,
        "shutil": types.SimpleNamespace(which=lambda name: f"/usr/bin/{name}"),
    }
    saved = {name: binding.__dict__.get(name) for name in replacements}
    binding.__dict__.update(replacements)
    try:
        yield oracle
    finally:
        for name, value in saved.items():
            if value is None:
                binding.__dict__.pop(name, None)
            else:
                binding.__dict__[name] = value

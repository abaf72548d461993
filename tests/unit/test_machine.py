"""topology_of(spec) is what read_topology sees in the sysfs tree of the same spec.

``torchx topo -h NAME`` plans on topology_of without writing any tree, the tests plan on
written trees: these checks keep the two one machine.
"""

from __future__ import annotations

import ast
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import MachineRoot
from tests.fixtures.fake_sysfs import write_sysfs
from tests.fixtures.machines import MACHINES
from tests.unit.test_plan_properties import machines
from torchx_ext.numa.machine import MachineSpec, topology_of
from torchx_ext.numa.topology import ALL_ONLINE, Topology, read_topology
from torchx_ext.resources import HOSTS

PACKAGE = Path(__file__).resolve().parents[2] / "torchx_ext"


def assert_same(described: Topology, read: Topology) -> None:
    assert described == read
    # Equal mappings may still iterate differently, and the tables and JSON print in that order.
    assert list(described.cpus) == list(read.cpus)
    assert list(described.nodes) == list(read.nodes)
    for node in read.nodes:
        assert list(described.nodes[node].distances) == list(read.nodes[node].distances)


@pytest.mark.parametrize("name", sorted(name for name, machine in MACHINES.items() if machine.spec is not None))
def test_every_test_machine(name: str, machine_root: MachineRoot) -> None:
    spec = MACHINES[name].spec
    assert spec is not None
    root = machine_root(name)
    assert_same(topology_of(spec, str(root)), read_topology(root, ALL_ONLINE))


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_every_named_resource(name: str, tmp_path: Path) -> None:
    spec = HOSTS[name].machine
    root = write_sysfs(spec, tmp_path)
    assert_same(topology_of(spec, str(root)), read_topology(root, ALL_ONLINE))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machine=machines())
def test_random_machines(machine: tuple[MachineSpec, frozenset[int]]) -> None:
    # Offline CPUs, sparse node ids, memory-only nodes, GPUs without a node, odd caches.
    spec, _ = machine
    with tempfile.TemporaryDirectory() as directory:
        root = write_sysfs(spec, directory)
        assert_same(topology_of(spec, str(root)), read_topology(root, ALL_ONLINE))


def test_the_package_imports_no_test_fixture() -> None:
    # The sysfs writer is a fixture: production code describes machines with topology_of.
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
            else:
                continue
            offenders += [
                f"{path.relative_to(PACKAGE.parent)}: {module}"
                for module in modules
                if module.split(".")[0] == "tests" or module.split(".")[-1] == "fake_sysfs"
            ]
    assert offenders == []

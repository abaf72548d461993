from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.machines import MACHINES, SNAPSHOTS
from tests.fixtures.fake_sysfs import write_sysfs
from torchx_ext.numa.topology import ALL_ONLINE, Topology, read_topology
from torchx_ext.schedulers.local.records import STATE_ROOT_ENV

MachineRoot = Callable[[str], Path]
# docker_client and test_image, for tests/docker and the conformance suite's local_docker;
# kube_cluster (the fake Kubernetes API server) for tests/kubernetes and its kubernetes;
# slurm_cluster (the two-node test Slurm) for tests/slurm and the conformance suite's slurm;
# registry (the loopback image registry) for the workspace tests;
# runner (torchx's Runner) for every suite that submits jobs.
pytest_plugins = ["tests.fixtures.docker_engine", "tests.fixtures.kube_api", "tests.fixtures.registry", "tests.fixtures.slurm_cluster",
                  "tests.helpers"]


@pytest.fixture(scope="session", autouse=True)
def local_cwd_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Jobs the tests submit to local_cwd are recorded here, not in the user's state directory."""
    state = tmp_path_factory.mktemp("local_cwd_state")
    os.environ.setdefault(STATE_ROOT_ENV, str(state))
    return Path(os.environ[STATE_ROOT_ENV])


@pytest.fixture(scope="session", autouse=True)
def warm_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Warm interpreters the tests start (local_cwd's -cfg warm=true) listen here, not where the
    user's do, and are stopped at the end."""
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    yield runtime
    from torchx_ext.warm import client

    client.stop()


@pytest.fixture(scope="session")
def machine_root(tmp_path_factory: pytest.TempPathFactory) -> MachineRoot:
    """name -> the sysfs root of that test machine (written once per session)."""
    written: dict[str, Path] = {}

    def root(name: str) -> Path:
        machine = MACHINES[name]
        if machine.spec is None:
            return SNAPSHOTS / name
        if name not in written:
            written[name] = write_sysfs(machine.spec, tmp_path_factory.mktemp(name))
        return written[name]

    return root


@pytest.fixture(scope="session")
def machine_topology(machine_root: MachineRoot) -> Callable[[str], Topology]:
    """name -> the Topology of that test machine, restricted to its cpuset if it has one."""

    def topology(name: str) -> Topology:
        allowed = MACHINES[name].allowed
        return read_topology(machine_root(name), ALL_ONLINE if allowed is None else allowed)

    return topology


@pytest.fixture
def two_cpus() -> list[int]:
    """The CPUs this process may use, when there are at least two (CI has two: fail there)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs two CPUs for binding tests; this process may use only {cpus}")
        pytest.skip("binding tests need two CPUs")
    return cpus

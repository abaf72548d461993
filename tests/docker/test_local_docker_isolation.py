"""A local_docker job publishes nothing on the host and listens only inside its own network.

A two-replica job trains (its agents' store, its workers' store and gloo all up). Every port its
rank 0 container listens on is then tried three ways: from the other replica's container, on the
job's network (each that is not bound to the container's loopback connects: the test can tell a
port that answers); from the engine's host, at its loopback; and from a second test host (a
network namespace the test makes) at this host's address (each is refused: nothing is published).
Every container is on the job's network alone, with no port bindings.

What is not shown here: that a container of another network cannot route to the job's. That is
the engine's own isolation (its iptables rules), which the test engine runs without
(``--iptables=false``, scripts/docker_engine.sh); docs/security.md says so.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from torchx.runner import Runner

from tests.conformance.test_faults import _wait_for_step
from tests.docker.test_local_docker import app_id_of, of_app, scheduler  # noqa: F401  (a fixture)
from tests.fixtures.netns import in_host, network, require_netns
from tests.integration.test_local_isolation import CONNECT_EACH, listening
from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.docker.scheduler import DockerScheduler

CHECKPOINTED = Path(__file__).parents[1] / "conformance" / "jobs" / "checkpointed.py"


def _tried(argv_prefix: list[str], address: str, ports: list[int]) -> dict[str, str]:
    tried = subprocess.run([*argv_prefix, sys.executable, "-c", CONNECT_EACH, address, json.dumps(ports)],
                           capture_output=True, text=True, timeout=120, check=True)
    return dict(json.loads(tried.stdout))


def test_a_job_publishes_nothing_on_the_host_and_listens_only_in_its_own_network(
    runner: Runner, scheduler: DockerScheduler, docker_client: Any, test_image: Any, tmp_path: Path  # noqa: F811
) -> None:
    require_netns()
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    app = ddp(str(directory), "400", "0.25", script=str(CHECKPOINTED), j="2x1", image=test_image.name,
              mounts=[*test_image.mount_options, "type=bind", f"src={directory}", f"dst={directory}"])
    handle = runner.run(app, "local_docker", cfg={})
    app_id = app_id_of(handle)
    _wait_for_step(directory, 2)  # both ranks have met in gloo and trained

    containers = sorted(of_app(docker_client, "containers", app_id), key=lambda container: container.name)
    assert len(containers) == 2
    for container in containers:
        container.reload()
        assert list(container.attrs["NetworkSettings"]["Networks"]) == [app_id], container.name
        assert not container.attrs["HostConfig"]["PortBindings"], container.name
        assert container.attrs["HostConfig"]["PublishAllPorts"] is False, container.name
        assert not any(container.attrs["NetworkSettings"]["Ports"].values()), container.name
    rank0, rank1 = containers
    in_rank0 = ["nsenter", "-t", str(rank0.attrs["State"]["Pid"]), "-n"]
    bound = {port: address for address, port in listening(in_rank0)}
    ports = sorted(bound)
    # The agents' store and the workers' store, at least, for the other replica to reach (what
    # listens on loopback in the container serves that container alone).
    served = sorted(port for port, address in bound.items() if not ipaddress.ip_address(address).is_loopback)
    assert len(served) >= 2, bound
    rank0_address = rank0.attrs["NetworkSettings"]["Networks"][app_id]["IPAddress"]

    on_its_network = _tried(["nsenter", "-t", str(rank1.attrs["State"]["Pid"]), "-n"], rank0_address, served)
    on_the_host = _tried([], "127.0.0.1", ports)
    with network("dki", ["dki-other"]) as net:
        from_another_host = _tried(in_host(net.hosts[0], []), net.bridge_address, ports)

    assert set(on_its_network.values()) == {"connected"}, on_its_network
    assert set(on_the_host.values()) == {"ConnectionRefusedError"}, on_the_host
    assert set(from_another_host.values()) == {"ConnectionRefusedError"}, from_another_host

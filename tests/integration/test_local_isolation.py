"""A local_cwd job listens on loopback only: its rendezvous store, its workers' store and gloo.

The whole job runs on a test host of its own (a network namespace with its own address and host
name, tests/fixtures/netns.py), through the torchx CLI; while it trains, a second test host tries
every port the job listens on, at the first host's address: each connection is refused. With
``--max_retries`` the store is local_cwd's own process and the workers' store is fresh per attempt;
without, replica 0's launcher serves both.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conformance.test_faults import _history
from tests.fixtures.netns import in_host, network, require_netns
from tests.helpers import STATE_ROOT_ENV, TORCHX

CHECKPOINTED = str(Path(__file__).parents[1] / "conformance" / "jobs" / "checkpointed.py")
CONNECT_EACH = ("import json, socket, sys\n"
                "address, ports = sys.argv[1], json.loads(sys.argv[2])\n"
                "said = {}\n"
                "for port in ports:\n"
                "    try:\n"
                "        socket.create_connection((address, port), timeout=5).close(); said[port] = 'connected'\n"
                "    except OSError as error:\n"
                "        said[port] = type(error).__name__\n"
                "print(json.dumps(said))\n")


def listening(in_namespace: list[str]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket listening in a network namespace, which
    ``in_namespace`` enters (``ip netns exec NAME``, ``nsenter -t PID -n``)."""
    shown = subprocess.run([*in_namespace, "ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in shown.splitlines():
        local = line.split()[3]
        address, _, port = local.rpartition(":")
        found.append((address.strip("[]").split("%")[0].replace("*", "0.0.0.0"), int(port)))  # ss's "every address"
    return found


@pytest.mark.parametrize("max_retries", [0, 1])
def test_a_second_host_cannot_connect_to_anything_a_local_job_listens_on(tmp_path: Path, max_retries: int) -> None:
    require_netns()
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    # No interface named for gloo: the job's own choice is what is tested.
    env = {**{key: value for key, value in os.environ.items() if not key.endswith("_SOCKET_IFNAME")},
           STATE_ROOT_ENV: str(tmp_path / "state")}
    with network("iso", ["iso-job", "iso-other"]) as net:
        job_host, other = net.hosts
        # torchx's CLI waits for a local job to end, printing its handle first.
        cli = subprocess.Popen(
            in_host(job_host, [*TORCHX, "run", "-s", "local_cwd", "-cfg", f"log_dir={tmp_path / 'logs'}", "dist.ddp",
                               "-j", "2x1", "--max_retries", str(max_retries), "--script", CHECKPOINTED, "--",
                               str(directory), "400", "0.25"]),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert cli.stdout is not None
        handle = next(line.strip() for line in cli.stdout if line.startswith("local_cwd://"))
        try:
            deadline = time.monotonic() + 120
            while len(_history(directory)) < 2:  # both ranks have met in gloo and trained
                assert time.monotonic() < deadline, "no second step"
                time.sleep(0.1)
            listeners = listening(["ip", "netns", "exec", job_host.namespace])

            # The agents' store and the workers' (one each, or local_cwd's store process), gloo's pairs.
            assert len(listeners) >= 3, listeners
            assert all(ipaddress.ip_address(address).is_loopback for address, _ in listeners), listeners
            tried = subprocess.run(in_host(other, [sys.executable, "-c", CONNECT_EACH, job_host.address,
                                                   json.dumps(sorted({port for _, port in listeners}))]),
                                   capture_output=True, text=True, timeout=120, check=True)
            said = json.loads(tried.stdout)
            assert set(said.values()) == {"ConnectionRefusedError"}, said
        finally:
            cancelled = subprocess.run(in_host(job_host, [*TORCHX, "cancel", handle]), env=env,
                                       capture_output=True, text=True, timeout=120)
            cli.wait(timeout=120)
            assert cancelled.returncode == 0, cancelled.stderr


def test_the_loopback_forms_of_a_rendezvous_endpoint_are_told_from_the_others() -> None:
    from torchx_ext.launcher.rendezvous.loopback import endpoint_is_loopback

    assert [endpoint_is_loopback(text) for text in ("localhost:29500", "127.0.0.1:0", "[::1]:29500", "127.0.0.20",
                                                    "node1:29500", "10.0.0.1:29500", "[fd00::1]:29500", "")] == [
        True, True, True, True, False, False, False, False]


def test_a_replica_told_an_address_where_its_store_does_not_listen_fails_at_once_saying_what_to_set(
        tmp_path: Path) -> None:
    # local_cwd's store process (a job that may restart) listens on loopback; the user names the
    # host's own address as rank 0's host. Before, both launchers waited on the store in silence.
    from tests.conformance.conftest import _local_leftovers

    require_netns()
    env = {**os.environ, STATE_ROOT_ENV: str(tmp_path / "state")}
    with network("unr", ["unr-job"]) as net:
        (job_host,) = net.hosts
        started = time.monotonic()
        done = subprocess.run(
            in_host(job_host, [*TORCHX, "run", "-s", "local_cwd", "-cfg", f"log_dir={tmp_path / 'logs'}", "dist.ddp",
                               "-j", "2x1", "--max_retries", "1", "--env", f"TORCHX_RANK0_HOST={job_host.address}",
                               "--script", CHECKPOINTED, "--", str(tmp_path), "400", "0.25"]),
            env=env, capture_output=True, text=True, timeout=180)
        ended_s = time.monotonic() - started
    said = done.stdout + done.stderr
    handle = next(line.strip() for line in said.splitlines() if line.startswith("local_cwd://"))

    # Well within the store's connect timeout (60 s), and the job's summary says why and what to set.
    assert ended_s < 60, said
    summary = said[said.index("job failed"):]
    assert f"cannot reach the job's rendezvous store at {job_host.address}:" in summary, said
    assert "listens on 127.0.0.1:" in summary and "TORCHX_EXT_STORE_ADDR=0.0.0.0" in summary, summary
    assert _local_leftovers(handle.rsplit("/", 1)[-1]) == []

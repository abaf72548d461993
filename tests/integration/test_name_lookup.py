"""The store host's name stops resolving for 15 s while a worker fails, on local_cwd: each replica
runs on a host of the test's own (tests/fixtures/netns.py) whose ``/etc/hosts`` is the only place
the name resolves, and the test takes the name out of every one of them, as a resolver that drops
its answers looks. Nothing of the job was touched: the failed worker costs its one restart, and no
node is counted lost for a lookup.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.conftest import _local_leftovers
from tests.conformance.jobs_api import wait
from tests.conformance.test_faults import _history, _wait_for_step
from tests.fixtures.netns import hosts, prepare_local_cwd_on_hosts, run_on_hosts
from tests.helpers import record_restart
from torchx_ext.components.dist import ddp

STORE_STEPPED = str(Path(__file__).parents[1] / "conformance" / "jobs" / "store_stepped.py")
STEPS = 100  # 23 s of training after the failure: the watchdog had time to count a node lost
FAIL_STEP = 8
STEP_S = 0.25
UNRESOLVED_S = 15.0


# Both c10d handlers: the store's address is chosen where the launcher's store is made, for either.
@pytest.mark.parametrize("handler", ["arrivals", "torch"])
def test_a_store_name_that_does_not_resolve_for_15_s_while_a_worker_fails_costs_one_restart(
    runner: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handler: str
) -> None:
    directory = prepare_local_cwd_on_hosts(monkeypatch, tmp_path)
    with hosts("dn", [1, 1], tmp_path) as net:
        # The launchers reach the store by a name of its own, which only the hosts' files resolve.
        store_name = f"store-{os.getpid()}.test"
        plan = json.loads(net.plan.read_text())
        net.plan.write_text(json.dumps({**plan, "rank0_host": store_name}))
        hosts_files = [Path("/etc/netns") / host.namespace / "hosts" for host in net.hosts]
        resolving = {path: path.read_text() + f"{net.bridge_address} {store_name}\n" for path in hosts_files}
        for path, text in resolving.items():
            path.write_text(text)  # in place: the file bind-mounted over each host's /etc/hosts

        app = ddp(str(directory), str(STEPS), str(STEP_S), "1", str(FAIL_STEP), script=STORE_STEPPED, j="2x1",
                  max_retries=1, env={"PET_C10D_HANDLER": handler})
        role = app.roles[0]
        run_on_hosts(role, net.plan)
        handle = runner.run(app, "local_cwd", cfg={"log_dir": str(tmp_path / "logs")})
        _wait_for_step(directory, 3)
        deadline = time.monotonic() + 60
        for path in hosts_files:
            path.write_text(resolving[path].replace(f" {store_name}\n", " \n"))  # the address stays, unnamed
        try:
            while not (directory / "failed_at").exists():
                assert time.monotonic() < deadline, "rank 1 did not fail"
                time.sleep(0.05)
            time.sleep(max(0.0, UNRESOLVED_S - (time.time() - float((directory / "failed_at").read_text()))))
        finally:
            for path, text in resolving.items():
                path.write_text(text)
        resolves_again = time.time()

        state = wait(runner, handle, timeout_s=180)
        logs = "".join(f"[{replica}] {line}" for replica in range(2) for line in runner.log_lines(handle, role.name, replica))
        (tmp_path / "job.log").write_text(logs)  # kept with a failed test's directory
        torchx_lines = "\n".join(line for line in logs.splitlines() if "torchx_ext" in line)
        assert state == AppState.SUCCEEDED, torchx_lines[-4000:]
        history = _history(directory)
        assert [entry[0] for entry in history] == list(range(STEPS)), (history, torchx_lines[-4000:])
        failed_at = float((directory / "failed_at").read_text())
        after = [entry for entry in history if entry[2] > failed_at]
        # One host's clock: the test's and the job's namespaces share this kernel.
        record_restart("a failed worker to the next step (the name back + 10 s)",
                       after[0][2] - failed_at if after else float("inf"), resolves_again - failed_at + 10)
        assert after and after[0][2] <= resolves_again + 10, (failed_at, resolves_again, history, torchx_lines[-4000:])
        assert "lost node" not in logs, torchx_lines[-4000:]
        # One restart in place, each launcher's, and no replica replaced.
        again = [line for line in logs.splitlines() if "rendezvous again" in line]
        assert sorted(line[:3] for line in again) == ["[0]", "[1]"], (again, torchx_lines[-4000:])
        status = runner.status(handle)
        assert status is not None and status.num_restarts == 0, (status, torchx_lines[-4000:])
        assert _local_leftovers(parse_app_handle(handle).app_id) == []

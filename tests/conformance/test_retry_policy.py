"""torchx's retry_policy on a two-role app whose roles know nothing of elastic training: the
reader fails once; REPLICA starts the reader again and leaves the trainer alone, APPLICATION
restarts the whole app. Either way the app succeeds within one retry."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from torchx.runner import Runner
from torchx.specs import AppDef, AppState, BindMount, Resource, RetryPolicy, Role, parse_mounts

from tests.conformance.cases import EVERY_CASE
from tests.conformance.conftest import JOBS, SchedulerUnderTest
from tests.conformance.jobs_api import wait

# Where each policy is honoured. Kubernetes' job backend refuses APPLICATION with retries in one
# line (tests/unit/test_kubernetes_request.py).
HONOURED = {
    RetryPolicy.REPLICA: EVERY_CASE,
    RetryPolicy.APPLICATION: [name for name in EVERY_CASE if name != "kubernetes"],
}


def two_roles(scheduler: SchedulerUnderTest, policy: RetryPolicy, directory: Path) -> AppDef:
    image = str(scheduler.component_args.get("image", ""))
    mounts = [BindMount(str(directory), str(directory))] if scheduler.shared_dir_mounts(directory) else []
    mounts += parse_mounts(list(scheduler.component_args.get("mounts", [])))  # the test image's Python
    return AppDef("two-roles", roles=[
        Role(name, image=image, entrypoint=sys.executable, args=[str(JOBS / "two_roles.py"), name, str(directory)],
             max_retries=1, retry_policy=policy, mounts=mounts,
             resource=Resource(cpu=int(scheduler.component_args.get("cpu", 1)), gpu=0, memMB=512))
        for name in ("trainer", "reader")
    ])


@pytest.mark.parametrize("scheduler, policy, trainer_starts", [
    pytest.param(name, policy, starts, id=f"{name}-{policy.value}")
    for policy, starts in ((RetryPolicy.REPLICA, 1), (RetryPolicy.APPLICATION, 2)) for name in HONOURED[policy]
], indirect=["scheduler"])
def test_a_failed_replica_restarts_what_the_roles_retry_policy_says(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, policy: RetryPolicy, trainer_starts: int
) -> None:
    handle = runner.run(two_roles(scheduler, policy, tmp_path), scheduler.name, cfg=scheduler.cfg)

    assert wait(runner, handle, timeout_s=120) == AppState.SUCCEEDED
    assert (tmp_path / "reader.starts").read_text().count("start") == 2
    assert (tmp_path / "trainer.starts").read_text().count("start") == trainer_starts

"""Job records of the format before each role's policy was kept apart (format 1) are still read:
a local_cwd job submitted before an upgrade is described and listed, a slurm job queued or
requeued across one still runs (its step program reads the request on every node).

The format-1 files are what commit bfa1e56 wrote for ``dist.ddp -j 2x1 --spares 1
--max_retries 2`` (local_cwd's and slurm's ``build_request(...).to_json()``); they are kept as
they were, never regenerated."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchx_ext.schedulers.common.role_policy import RolePolicy
from torchx_ext.schedulers.local.request import LocalJobRequest
from torchx_ext.schedulers.slurm.request import SlurmJobRequest

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
SPARES_POLICY = RolePolicy(retry_policy="HOT_SPARE", max_retries=2, num_replicas=3, min_replicas=2, has_spares=True)


def test_a_local_request_of_format_1_reads_as_the_same_policy_and_is_written_back_as_format_2() -> None:
    request = LocalJobRequest.from_json((RECORDS / "local_request_format_1.json").read_text())

    assert request.roles[0].policy == SPARES_POLICY
    assert [replica.replica_id for replica in request.replicas()] == [0, 1, 2]
    again = LocalJobRequest.from_json(request.to_json())
    assert again == request and '"format": 2' in request.to_json()


@pytest.mark.parametrize("format_", [1, 2])
def test_a_slurm_request_of_format_1_or_2_reads_as_the_same_policy_and_is_written_back_as_format_3(
        format_: int) -> None:
    # Format 2's file: what commit c44f365 wrote for the same app (before the driver: its batch
    # script, slurm_batch_format_2.sh, runs its own retry loop; test_slurm_driver.py runs it).
    request = SlurmJobRequest.from_json((RECORDS / f"slurm_request_format_{format_}.json").read_text())

    assert request.roles[0].policy == SPARES_POLICY and request.roles[0].num_replicas == 3
    again = SlurmJobRequest.from_json(request.to_json())
    assert again == request and '"format": 3' in request.to_json()

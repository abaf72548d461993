"""Which allocation a submission means, what an allocation holds, and a job's state in one."""

from __future__ import annotations

import pytest

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.states import State
from torchx_ext.schedulers.slurm.step import partial_gpus
from torchx_ext.schedulers.slurm.allocation import (APP_ID_ENV, DriverFacts, allocation_of, driver_environment,
                                                    job_state, parse_allocation)

# scontrol -d -o show job of the test cluster (shortened): two nodes that hold different CPUs.
SHOWN = ("JobId=336 JobName=held UserId=root(0) JobState=RUNNING Reason=None NodeList=node[1-2] NumNodes=2 NumCPUs=3 "
         "TRES=cpu=3,mem=16070M,node=2 JOB_GRES=gpu:h100:4 Nodes=node1 CPU_IDs=0-1 Mem=8035 GRES=gpu:h100:2(IDX:0,3) "
         "Nodes=node2 CPU_IDs=0 Mem=4000 GRES=gpu:h100:2(IDX:0-1) MinCPUsNode=1 Features=(null)")


def test_an_allocation_holds_the_least_any_of_its_nodes_holds() -> None:
    held = parse_allocation("336", SHOWN)
    assert (held.state, held.nodes, held.cpus_per_node, held.gpus_per_node, held.mem_per_node_mb) == \
        ("RUNNING", 2, 1, 2, 4000)


@pytest.mark.parametrize("cfg, environ, expected", [
    ({}, {}, None),
    ({}, {"SLURM_JOB_ID": "77"}, "77"),  # salloc's shell, or a batch job's script
    ({"allocation": "12"}, {"SLURM_JOB_ID": "77"}, "12"),
    ({"allocation": "new"}, {"SLURM_JOB_ID": "77"}, None),
])
def test_the_allocation_is_the_one_given_else_the_shells(cfg: dict[str, str], environ: dict[str, str],
                                                          expected: str | None) -> None:
    assert allocation_of(cfg, environ) == expected


@pytest.mark.parametrize("bad", ["12.3", "abc", "12_0"])
def test_an_allocation_that_is_no_job_id_is_one_line(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"invalid allocation '{bad}'.*or 'new' for a job of its own"):
        allocation_of({"allocation": bad}, {})


def test_the_driver_keeps_no_option_of_the_allocations_shell_but_slurm_conf() -> None:
    env = driver_environment({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "8", "SLURM_CONF": "/c", "SBATCH_PARTITION": "p",
                              "HOME": "/h"}, "7", "7-train-x")
    assert env == {"SLURM_CONF": "/c", "HOME": "/h", "TORCHX_EXT_SLURM_ALLOCATION": "7", APP_ID_ENV: "7-train-x"}


def facts(**given: object) -> DriverFacts:
    return DriverFacts(**{"allocation": "5", "allocation_state": "RUNNING", "cancelled": False, "driver_exit": None,
                          "driver_alive": True, "started": True, **given})  # type: ignore[arg-type]


@pytest.mark.parametrize("given, state, why", [
    ({}, State.RUNNING, ""),
    ({"started": False}, State.PENDING, "starting its steps in allocation 5"),
    ({"driver_exit": 0}, State.SUCCEEDED, ""),
    ({"driver_exit": 1}, State.FAILED, ""),
    ({"cancelled": True, "driver_exit": 143}, State.CANCELLED, "cancelled by request"),
    ({"allocation_state": "TIMEOUT"}, State.FAILED, "allocation 5 ended (TIMEOUT) under the job"),
    ({"allocation_state": None, "driver_exit": 1}, State.FAILED, "allocation 5 ended (gone) under the job"),
    ({"allocation_state": "COMPLETING", "driver_exit": 1}, State.RUNNING, "allocation 5 is ending"),
    ({"allocation_state": "SUSPENDED"}, State.RUNNING, "allocation 5 is SUSPENDED"),  # and back later
    ({"driver_alive": False}, State.FAILED, "driver on the submitting host ended without a record"),
    ({"driver_alive": None}, State.RUNNING, ""),  # on another host: its records tell
])
def test_a_jobs_state_in_an_allocation(given: dict[str, object], state: State, why: str) -> None:
    found, _, message = job_state(facts(**given))
    assert found is state and (why in message if why else message == ""), message


@pytest.mark.parametrize("env, held, forked", [
    ({}, 8, True),  # a CPU job
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "SLURM_STEP_GPUS": "0,1,2,3,4,5,6,7"}, 8, True),  # the whole node
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "0,1"}, 8, True),  # numbered as the node numbers them
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "4,5"}, 8, False),  # ConstrainDevices: its own numbers
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "4,5"}, 2, True),  # all the allocation holds there
    ({"CUDA_VISIBLE_DEVICES": "0"}, 4, False),  # no word of the node's numbers
])
def test_a_warm_fork_only_where_it_sees_the_steps_gpus_as_the_step_does(env: dict[str, str], held: int,
                                                                        forked: bool) -> None:
    why = partial_gpus(env, held)
    assert (why == "") is forked
    assert forked or f"holds {len(env['CUDA_VISIBLE_DEVICES'].split(','))} of the node's {held} GPUs" in why

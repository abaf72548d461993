"""local_cwd's dry-run: AppDef + host topology -> the processes it would start."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from torchx import specs

from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.topology import Topology
from torchx_ext.schedulers.local.request import LocalJobRequest
from torchx_ext.schedulers.local.build import build_request, describe_request

TopologyOf = Callable[[str], Topology]


def request_for(app: specs.AppDef, topology: Topology | None, environ: dict[str, str] | None = None) -> LocalJobRequest:
    return build_request(
        app, app_id="job-1", app_dir="/logs/job-1", cwd="/work", interpreter="/venv/bin/python",
        environ={"PATH": "/usr/bin"} if environ is None else environ, topology=topology,
    )


def test_two_replicas_on_a_dgx_get_a_node_and_its_gpus_each(machine_topology: TopologyOf) -> None:
    request = request_for(ddp(script="train.py", j="2x4", gpu=8), machine_topology("dgx-h100"))

    first, second = request.replicas()
    assert request.slices == [
        "replica 0: cpus=0-55,112-167 numa_nodes=0 gpus=0,1,2,3",
        "replica 1: cpus=56-111,168-223 numa_nodes=1 gpus=4,5,6,7",
    ]
    assert first.cpus == [*range(0, 56), *range(112, 168)]
    assert (first.env["CUDA_VISIBLE_DEVICES"], second.env["CUDA_VISIBLE_DEVICES"]) == ("0,1,2,3", "4,5,6,7")


def test_a_user_cuda_visible_devices_is_left_alone(machine_topology: TopologyOf) -> None:
    request = request_for(
        ddp(script="train.py", j="2x1", gpu=1), machine_topology("dgx-h100"),
        environ={"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "3,5"},
    )
    assert all("CUDA_VISIBLE_DEVICES" not in replica.env for replica in request.replicas())


def test_more_replicas_than_nodes_split_whole_cores(machine_topology: TopologyOf) -> None:
    request = request_for(ddp(script="train.py", j="4x1"), machine_topology("cpu-2socket"))

    cpus = [set(replica.cpus or []) for replica in request.replicas()]
    assert all(cpus) and sum(len(piece) for piece in cpus) == len(set().union(*cpus))  # disjoint, none empty


def test_one_replica_or_slicing_off_keeps_the_submitters_cpus(machine_topology: TopologyOf) -> None:
    single = request_for(ddp(script="train.py", j="1x2"), machine_topology("dgx-h100"))
    unsliced = request_for(ddp(script="train.py", j="2x2"), None)

    assert [replica.cpus for replica in single.replicas()] == [None]
    assert [replica.cpus for replica in unsliced.replicas()] == [None, None]
    assert unsliced.slices == []


def test_replicas_get_the_rank0_host_and_resolved_macros_but_no_port_yet() -> None:
    request = request_for(ddp(script="train.py", j="2x2"), None)

    replica = request.replicas()[1]
    assert replica.argv[0] == "/venv/bin/python"  # `python` is the submitting interpreter
    assert replica.argv[replica.argv.index("--rdzv-id") + 1] == "job-1"
    assert replica.argv[replica.argv.index("--rdzv-endpoint-env") + 1] == "TORCHX_RANK0_HOST"
    assert replica.env["TORCHX_RANK0_HOST"] == "localhost"
    # The port is picked by the supervisor as the job starts; a dry-run binds nothing.
    assert "TORCHX_EXT_RDZV_PORT" not in replica.env
    assert "chosen when the job starts" in describe_request(request)
    assert replica.env["TORCHELASTIC_ERROR_FILE"] == "/logs/job-1/train/1/error.json"
    assert replica.env["PATH"] == "/usr/bin:/work"
    assert replica.log_dir == "/logs/job-1/train/1"


def test_the_request_survives_json_and_prints_its_slices(machine_topology: TopologyOf) -> None:
    request = request_for(ddp(script="train.py", j="2x4", gpu=8), machine_topology("dgx-h100"))

    assert LocalJobRequest.from_json(request.to_json()) == request
    assert "slice replica 1: cpus=56-111,168-223 numa_nodes=1 gpus=4,5,6,7" in describe_request(request)


def test_an_entrypoint_not_on_path_is_refused_naming_it() -> None:
    app = specs.AppDef("app", roles=[specs.Role("worker", image="", entrypoint="no-such-tool", args=[])])

    with pytest.raises(InvalidArgumentError, match="entrypoint 'no-such-tool' of role 'worker' is not on PATH"):
        request_for(app, None)


def two_role_app(gpus: tuple[int, int], replicas: tuple[int, int]) -> specs.AppDef:
    return specs.AppDef("two", roles=[
        specs.Role(name, image="", entrypoint="python", args=["-c", "pass"], num_replicas=count,
                   resource=specs.Resource(cpu=1, gpu=gpu, memMB=1024), env={"CUDA_VISIBLE_DEVICES": "7"})
        for name, gpu, count in zip(("trainer", "reader"), gpus, replicas)
    ])


def test_auto_set_cuda_visible_devices_splits_the_gpus_in_role_order_as_torchx_does() -> None:
    request = build_request(two_role_app((2, 1), (1, 3)), app_id="job-1", app_dir="/logs/job-1", cwd="/work",
                            interpreter="/venv/bin/python", environ={"PATH": "/usr/bin"}, topology=None,
                            gpus_to_split=8)

    assert [replica.env["CUDA_VISIBLE_DEVICES"] for replica in request.replicas()] == ["0,1", "2", "3", "4"]
    assert request.warnings == []


def test_auto_set_cuda_visible_devices_with_too_few_gpus_sets_nothing_and_says_so() -> None:
    request = build_request(two_role_app((4, 0), (3, 1)), app_id="job-1", app_dir="/logs/job-1", cwd="/work",
                            interpreter="/venv/bin/python", environ={"PATH": "/usr/bin"}, topology=None,
                            gpus_to_split=8)

    assert [replica.env["CUDA_VISIBLE_DEVICES"] for replica in request.replicas()] == ["7"] * 4  # the roles' own
    assert request.warnings == ["auto_set_cuda_visible_devices: the app asks for 12 GPUs and this host has 8: "
                                "CUDA_VISIBLE_DEVICES is not set"]
    assert "warning: auto_set_cuda_visible_devices" in describe_request(request)

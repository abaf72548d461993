"""local_docker's dry-run: AppDef + host topology -> the containers it would create."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from torchx import specs

from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.topology import Topology
from torchx_ext.schedulers.docker.request import DockerJobRequest, build_request, describe_request

TopologyOf = Callable[[str], Topology]


def request_for(app: specs.AppDef, topology: Topology | None, **kwargs: object) -> DockerJobRequest:
    return build_request(app, app_id="train-abcd1234", topology=topology, **kwargs)  # type: ignore[arg-type]


def test_two_replicas_on_a_dgx_get_a_numa_node_its_memory_and_its_gpus_each(machine_topology: TopologyOf) -> None:
    request = request_for(ddp(script="train.py", j="2x4", h="dgx_h100"), machine_topology("dgx-h100"))

    first, second = request.containers
    assert (first.cpuset_cpus, first.cpuset_mems, first.gpus) == ("0-55,112-167", "0", (0, 1, 2, 3))
    assert (second.cpuset_cpus, second.cpuset_mems, second.gpus) == ("56-111,168-223", "1", (4, 5, 6, 7))
    assert first.gpu_vendor == "nvidia"
    # The container sees its GPUs as 0-3; the launcher learns which of the host's they are.
    assert (first.env["NVIDIA_VISIBLE_DEVICES"], second.env["NVIDIA_VISIBLE_DEVICES"]) == ("0,1,2,3", "4,5,6,7")
    text = describe_request(request)
    assert "train/0: container=train-abcd1234-train-0" in text
    assert "cpuset_cpus=0-55,112-167 cpuset_mems=0 gpus=0,1,2,3" in text
    assert "cpuset_cpus=56-111,168-223 cpuset_mems=1 gpus=4,5,6,7" in text


def test_eight_replicas_on_an_epyc_get_one_node_each_with_its_amd_gpu(machine_topology: TopologyOf) -> None:
    app = ddp(script="train.py", j="8x1", gpu=1)
    request = request_for(app, machine_topology("epyc-nps4"))

    assert [container.cpuset_mems for container in request.containers] == [str(node) for node in range(8)]
    assert [container.gpus for container in request.containers] == [(node,) for node in range(8)]
    assert {container.gpu_vendor for container in request.containers} == {"amd"}
    assert [container.env["ROCR_VISIBLE_DEVICES"] for container in request.containers] == [str(n) for n in range(8)]


def test_more_replicas_than_nodes_share_a_node_on_separate_cores(machine_topology: TopologyOf) -> None:
    request = request_for(ddp(script="train.py", j="4x1"), machine_topology("dgx-h100"))

    cpusets = [container.cpuset_cpus for container in request.containers]
    assert cpusets == ["0-27,112-139", "28-55,140-167", "56-83,168-195", "84-111,196-223"]
    assert [container.cpuset_mems for container in request.containers] == ["0", "0", "1", "1"]


def test_without_placement_no_cpuset_and_the_cpu_count_becomes_a_quota() -> None:
    request = request_for(ddp(script="train.py", j="2x1", cpu=3), None)

    assert all(container.cpuset_cpus is None and container.cpuset_mems is None for container in request.containers)
    assert {container.nano_cpus for container in request.containers} == {3_000_000_000}
    assert "cpuset_cpus=all cpuset_mems=all" in describe_request(request)


def test_names_hostnames_and_the_rank0_host(machine_topology: TopologyOf) -> None:
    request = request_for(ddp(script="train.py", j="3x1"), machine_topology("dev-2cpu"))

    names = [container.name for container in request.containers]
    assert names == ["train-abcd1234-train-0", "train-abcd1234-train-1", "train-abcd1234-train-2"]
    assert {container.env["TORCHX_RANK0_HOST"] for container in request.containers} == {names[0]}
    assert request.network == "train-abcd1234"
    assert all(container.labels["torchx_ext.app_id"] == "train-abcd1234" for container in request.containers)


def test_every_role_of_a_two_role_app_gets_the_first_roles_replica_0_as_rank0_as_in_torchx() -> None:
    roles = [specs.Role(name, image="img:1", entrypoint="python", num_replicas=2) for name in ("trainer", "reader")]
    request = request_for(specs.AppDef("two", roles=roles), None)

    assert {container.env["TORCHX_RANK0_HOST"] for container in request.containers} == {"train-abcd1234-trainer-0"}
    # Our launcher's rendezvous stays each role's own: its replica 0 hosts it.
    assert {container.role: container.env["TORCHX_EXT_RDZV_HOST"] for container in request.containers} == {
        "trainer": "train-abcd1234-trainer-0", "reader": "train-abcd1234-reader-0"}


def test_a_long_role_name_is_cut_to_a_63_character_hostname() -> None:
    app = ddp(script=f"{'Very_Long_' * 10}.py", j="2x1")
    request = build_request(app, app_id=f"{'a' * 31}-abcd1234", topology=None)

    assert all(len(container.name) <= 63 for container in request.containers)
    assert [container.name[-2:] for container in request.containers] == ["-0", "-1"]


def test_arguments_are_an_exact_argv_with_no_shell() -> None:
    value = "it's \"quoted\" $HOME `id`\nnext"
    request = request_for(ddp(value, script="echo.py", j="1x1", env={"V": value}), None)

    container = request.containers[0]
    assert container.command[-1] == value
    assert container.env["V"] == value


def test_memory_limit_and_shm(machine_topology: TopologyOf) -> None:
    app = ddp(script="train.py", j="1x1", memMB=4096)

    assert request_for(app, None).containers[0].shm_mb == 2048
    assert request_for(app, None, shm_size="1g").containers[0].shm_mb == 1024
    assert request_for(app, None).containers[0].memory_mb == 4096
    with pytest.raises(InvalidArgumentError, match=r"shm_size '8g' \(8192 MiB\) is more than the replica's memory limit \(4096 MiB\)"):
        request_for(app, None, shm_size="8g")
    with pytest.raises(InvalidArgumentError, match=r"invalid shm_size 'lots': expected 'auto', or a size"):
        request_for(app, None, shm_size="lots")


def test_replicas_sharing_a_host_divide_its_gpus_with_a_warning(machine_topology: TopologyOf) -> None:
    request = request_for(ddp(script="train.py", j="4x2", h="dgx_h100"), machine_topology("dgx-h100"))

    assert [container.gpus for container in request.containers] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert "train/0 gets GPUs 0,1 (2 of the 8 its role asks for): its replicas share one host" in request.warnings


def test_gpus_asked_on_a_host_without_any_are_refused(machine_topology: TopologyOf) -> None:
    with pytest.raises(InvalidArgumentError, match=r"asks for 1 GPUs per replica but replica slice .* has none"):
        request_for(ddp(script="train.py", j="2x1", gpu=1), machine_topology("dev-2cpu"))


def test_efa_and_neuron_devices_are_mounted_as_torchx_mounts_them_and_others_are_said_to_be_left_out() -> None:
    role = specs.Role("train", "img", entrypoint="python", resource=specs.Resource(
        cpu=1, gpu=0, memMB=0, devices={"vpc.amazonaws.com/efa": 2, "aws.amazon.com/neurondevice": 1, "x.io/fpga": 1}))
    request = request_for(specs.AppDef("train", [role]), None, privileged=True)

    (container,) = request.containers
    assert [(mount.kind, mount.source, mount.target, mount.permissions) for mount in container.mounts] == [
        ("device", "/dev/neuron0", "/dev/neuron0", "rwm"),
        ("device", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0", "rwm"),
        ("device", "/dev/infiniband/uverbs1", "/dev/infiniband/uverbs1", "rwm"),
    ]
    assert container.privileged and "restarts=0 privileged" in describe_request(request)
    assert request.warnings == ("role 'train': device 'x.io/fpga' is not one local_docker mounts "
                                "(vpc.amazonaws.com/efa, aws.amazon.com/neurondevice): left out",)


def test_copy_env_globs_then_env_then_the_role_env_and_ours_cannot_be_overridden() -> None:
    host = {"WANDB_API_KEY": "k", "WANDB_MODE": "offline", "HOME": "/root", "TORCHX_RANK0_HOST": "elsewhere"}
    app = ddp(script="train.py", j="2x1", env={"WANDB_MODE": "online"})
    request = request_for(app, None, host_env=host, copy_env=("WANDB_*", "TORCHX_*"), env={"EXTRA": "a:b"})

    first = request.containers[0]
    assert {key: first.env[key] for key in ("WANDB_API_KEY", "WANDB_MODE", "EXTRA")} == {
        "WANDB_API_KEY": "k", "WANDB_MODE": "online", "EXTRA": "a:b"}
    assert "HOME" not in first.env and first.env["TORCHX_RANK0_HOST"] == "train-abcd1234-train-0"


@pytest.mark.parametrize("policy, replicas, retries, whole_app", [
    (specs.RetryPolicy.APPLICATION, 2, 1, True),  # torchx's default: the app restarts, not the engine alone
    (specs.RetryPolicy.REPLICA, 2, 1, False),  # the engine's on-failure policy restarts the replica
    (specs.RetryPolicy.APPLICATION, 1, 1, False),  # one replica in all: the same thing
    (specs.RetryPolicy.APPLICATION, 2, 0, False),  # no retries: nothing restarts
])
def test_a_role_whose_retries_restart_the_whole_app_is_left_to_the_watcher(
        policy: specs.RetryPolicy, replicas: int, retries: int, whole_app: bool) -> None:
    app = ddp(script="train.py", j=f"{replicas}x1", image="img", max_retries=retries)
    app.roles[0].retry_policy = policy
    request = request_for(app, None)

    assert {container.whole_app for container in request.containers} == {whole_app}
    assert all(("torchx_ext.restarts_whole_app" in container.labels_on_engine()) == whole_app
               for container in request.containers)
    assert ("(of the whole app)" in describe_request(request)) == whole_app

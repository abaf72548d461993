"""local_docker on the real test engine: placement read back from the engine, cleanup, restarts,
the launcher as a container's main process, and the errors a user can act on.

The behaviour every scheduler shares (logs, failures, cancel, list, exact arguments) is in
tests/conformance/, which runs against local_docker too.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import Runner
from torchx.schedulers.api import Stream
from torchx.specs import AppDef, AppState, parse_app_handle

from tests.helpers import TORCHX
from tests.conformance.jobs_api import wait, wait_for_line
from torchx_ext.components.dist import ddp
from torchx_ext.errors import EngineError, InvalidArgumentError
from torchx_ext.schedulers.docker.scheduler import DockerScheduler

JOBS = Path(__file__).parent / "jobs"
CONFORMANCE_JOBS = Path(__file__).parents[1] / "conformance" / "jobs"
DGX_ROOT_MACHINE = "dgx-h100"


@pytest.fixture
def scheduler(docker_client: Any) -> Iterator[DockerScheduler]:
    made = DockerScheduler("test")
    before = {container.id for container in docker_client.containers.list(all=True)}
    yield made
    for container in docker_client.containers.list(all=True):
        app_id = container.labels.get("torchx_ext.app_id")
        if container.id not in before and app_id:
            made.delete(app_id)
    made.close()


def app_of(test_image: Any, script: Path, *args: str, j: str = "1x1", **kwargs: Any) -> AppDef:
    return ddp(*args, script=str(script), j=j, image=test_image.name, mounts=list(test_image.mount_options), **kwargs)


def app_id_of(handle: str) -> str:
    app_id: str = parse_app_handle(handle).app_id
    return app_id


def of_app(client: Any, kind: str, app_id: str) -> list[Any]:
    listing = {"containers": client.containers, "networks": client.networks, "volumes": client.volumes}[kind]
    if kind == "containers":
        return list(listing.list(all=True, filters={"label": f"torchx_ext.app_id={app_id}"}))
    return list(listing.list(filters={"label": f"torchx_ext.app_id={app_id}"}))


def test_each_replica_container_has_the_cpuset_the_dry_run_printed_and_its_workers_run_inside_it(
    runner: Runner, scheduler: DockerScheduler, docker_client: Any, test_image: Any
) -> None:
    app = app_of(test_image, JOBS / "affinity.py", j="2x2")
    dryrun = runner.dryrun(app, "local_docker", cfg={})
    planned = {container.name: (container.cpuset_cpus, container.cpuset_mems) for container in dryrun.request.containers}
    assert "cpuset_cpus=0 cpuset_mems=0" in str(dryrun) and "cpuset_cpus=1 cpuset_mems=0" in str(dryrun)

    handle = runner.schedule(dryrun)
    assert wait(runner, handle) == AppState.SUCCEEDED

    engine_has = {}
    for container in of_app(docker_client, "containers", app_id_of(handle)):
        host_config = container.attrs["HostConfig"]
        engine_has[container.name] = (host_config["CpusetCpus"], host_config["CpusetMems"])
    assert engine_has == planned
    reported = {}
    for replica in (0, 1):
        for line in runner.log_lines(handle, "affinity", replica):
            if "AFFINITY " in line:
                report = json.loads(line.split("AFFINITY ", 1)[1])
                reported[report["rank"]] = (replica, report["cpus"])
    assert reported == {0: (0, [0]), 1: (0, [0]), 2: (1, [1]), 3: (1, [1])}


def test_the_dry_run_on_a_dgx_places_each_replica_on_its_node_and_gpus(machine_root: Any) -> None:
    command = [*TORCHX, "run", "-s", "local_docker", "--dryrun", "--workspace", "",
               "-cfg", f"sysfs_root={machine_root(DGX_ROOT_MACHINE)}",
               "dist.ddp", "-j", "2x4", "-h", "dgx_h100", "--image", "my/image", "--script", "train.py"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stderr
    assert "cpuset_cpus=0-55,112-167 cpuset_mems=0 gpus=0,1,2,3" in result.stdout
    assert "cpuset_cpus=56-111,168-223 cpuset_mems=1 gpus=4,5,6,7" in result.stdout


def test_a_finished_job_keeps_its_logs_until_delete_removes_containers_network_and_records(
    runner: Runner, scheduler: DockerScheduler, docker_client: Any, test_image: Any
) -> None:
    handle = runner.run(app_of(test_image, CONFORMANCE_JOBS / "sleeper.py", j="2x1"), "local_docker", cfg={})
    wait_for_line(runner, handle, "sleeper", 1, r"running rank 1")
    app_id = app_id_of(handle)
    runner.cancel(handle)
    assert wait(runner, handle, timeout_s=30) == AppState.CANCELLED
    assert [container.status for container in of_app(docker_client, "containers", app_id)] == ["exited", "exited"]
    assert any("running rank 1" in line for line in runner.log_lines(handle, "sleeper", 1))
    listed = subprocess.run([*TORCHX, "list", "-s", "local_docker"], capture_output=True, text=True, timeout=120)
    assert app_id in listed.stdout

    deleted = subprocess.run([*TORCHX, "delete", handle], capture_output=True, text=True, timeout=120)

    assert deleted.returncode == 0, deleted.stderr
    assert (of_app(docker_client, "containers", app_id), of_app(docker_client, "networks", app_id),
            of_app(docker_client, "volumes", app_id)) == ([], [], [])
    assert runner.status(handle) is None


def test_a_replica_that_fails_once_is_restarted_by_max_retries(
    runner: Runner, scheduler: DockerScheduler, test_image: Any
) -> None:
    handle = runner.run(app_of(test_image, JOBS / "fail_once.py", max_retries=1), "local_docker", cfg={})

    assert wait(runner, handle) == AppState.SUCCEEDED
    status = runner.status(handle)
    assert status is not None and status.num_restarts == 1
    lines = "".join(runner.log_lines(handle, "fail_once", 0))
    assert "first attempt: failing" in lines and "second attempt: succeeding" in lines


def test_the_launcher_stops_on_sigterm_within_the_grace_and_orphans_are_reaped(
    runner: Runner, scheduler: DockerScheduler, docker_client: Any, test_image: Any
) -> None:
    orphans = runner.run(app_of(test_image, JOBS / "orphans.py"), "local_docker", cfg={})
    sleeper = runner.run(app_of(test_image, CONFORMANCE_JOBS / "sleeper.py"), "local_docker", cfg={"cancel_grace": 20})
    assert wait(runner, orphans) == AppState.SUCCEEDED
    assert any("ZOMBIES 0 pid1 /sbin/docker-init" in line for line in runner.log_lines(orphans, "orphans", 0))
    wait_for_line(runner, sleeper, "sleeper", 0, r"running rank 0")

    runner.cancel(sleeper)

    assert wait(runner, sleeper, timeout_s=30) == AppState.CANCELLED
    (container,) = of_app(docker_client, "containers", app_id_of(sleeper))
    code = container.attrs["State"]["ExitCode"]
    assert code not in (0, 137), f"exit code {code}: the launcher should stop its workers on SIGTERM, not be killed"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TORCHX, *args], capture_output=True, text=True, timeout=120, env=env)


def test_no_engine_is_one_line_naming_the_socket_tried_and_how_to_start_one(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    result = run_cli("run", "-s", "local_docker", "--workspace", "", "dist.ddp", "--image", "x", "--script", "t.py",
                     env=env)

    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("torchx: error:")]
    assert len(errors) == 1 and f"no Docker engine answers at unix://{tmp_path}/nothing.sock" in errors[0]
    assert "DOCKER_HOST" in errors[0] and "dockerd" in errors[0]


def test_a_missing_image_is_one_line_and_nothing_is_created(docker_client: Any, test_image: Any) -> None:
    before = len(docker_client.containers.list(all=True)), len(docker_client.networks.list())
    result = run_cli("run", "-s", "local_docker", "--workspace", "", "dist.ddp", "--image",
                     "torchx-ext-no-such-image:1", "--script", "t.py")

    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("torchx: error:")]
    assert len(errors) == 1 and "image 'torchx-ext-no-such-image:1' is not on the engine at" in errors[0]
    assert "docker build" in errors[0]
    assert (len(docker_client.containers.list(all=True)), len(docker_client.networks.list())) == before


def test_a_name_conflict_is_refused_and_leaves_nothing_of_the_app(
    runner: Runner, docker_client: Any, test_image: Any
) -> None:
    dryrun = runner.dryrun(app_of(test_image, CONFORMANCE_JOBS / "echo.py", j="2x1"), "local_docker", cfg={})
    second = dryrun.request.containers[1].name
    squatter = docker_client.containers.create(test_image.name, ["true"], name=second)
    try:
        with pytest.raises(InvalidArgumentError, match=rf"name conflict .*{second}.* was not started"):
            runner.schedule(dryrun)
        app_id = dryrun.request.app_id
        assert [container.name for container in docker_client.containers.list(all=True,
                filters={"label": f"torchx_ext.app_id={app_id}"})] == []
        assert of_app(docker_client, "networks", app_id) == []
    finally:
        squatter.remove(force=True)


def test_a_cpuset_the_engine_rejects_is_an_error_naming_it(
    runner: Runner, docker_client: Any, test_image: Any, machine_root: Any
) -> None:
    # Planned for a DGX, started here: the engine has no CPU 56.
    cfg = {"sysfs_root": str(machine_root(DGX_ROOT_MACHINE))}
    dryrun = runner.dryrun(app_of(test_image, CONFORMANCE_JOBS / "echo.py", j="2x1"), "local_docker", cfg=cfg)

    with pytest.raises(EngineError, match=r"refused a replica's cpuset .* slice_replicas=False"):
        runner.schedule(dryrun)
    assert of_app(docker_client, "containers", dryrun.request.app_id) == []
    assert of_app(docker_client, "networks", dryrun.request.app_id) == []


def test_gpus_name_each_replicas_own_and_an_engine_without_nvidias_runtime_refuses_them_in_one_line(
    runner: Runner, docker_client: Any, test_image: Any
) -> None:
    app = app_of(test_image, CONFORMANCE_JOBS / "echo.py", j="2x1")
    app.roles[0].resource.gpu = 1
    dryrun = runner.dryrun(app, "local_docker", cfg={"slice_replicas": False})
    assert [container.gpus for container in dryrun.request.containers] == [(0,), (0,)]  # as docker --gpus 1

    with pytest.raises(EngineError, match=r"refused a replica's devices .*NVIDIA Container Toolkit") as refused:
        runner.schedule(dryrun)
    assert "\n" not in str(refused.value)
    assert of_app(docker_client, "containers", dryrun.request.app_id) == []
    assert of_app(docker_client, "networks", dryrun.request.app_id) == []


def test_the_watcher_is_gone_once_the_job_ended(runner: Runner, scheduler: DockerScheduler, test_image: Any) -> None:
    handle = runner.run(app_of(test_image, CONFORMANCE_JOBS / "echo.py"), "local_docker", cfg={})
    assert wait(runner, handle) == AppState.SUCCEEDED
    app_id = app_id_of(handle)
    deadline = time.monotonic() + 5
    while (found := watchers(app_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert found == []


def watchers(app_id: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"torchx_ext.schedulers.docker.watcher" in command and app_id.encode() in command:
            found.append(int(entry.name))
    return found


def test_log_queries_regex_streams_window_and_follow(
    runner: Runner, scheduler: DockerScheduler, test_image: Any
) -> None:
    value = "to stderr"
    handle = runner.run(app_of(test_image, JOBS / "streams.py", value), "local_docker", cfg={})
    # Followed from the start: lines as they come, and the iteration ends with the container.
    followed = list(runner.log_lines(handle, "streams", 0, should_tail=True))
    assert wait(runner, handle) == AppState.SUCCEEDED

    assert any("OUT line 2" in line for line in followed)
    assert [line for line in runner.log_lines(handle, "streams", 0, regex=r"OUT line \d$")][-1].endswith("OUT line 9\n")
    errors = list(runner.log_lines(handle, "streams", 0, streams=Stream.STDERR))
    assert any(f"ERR {value}" in line for line in errors) and not any("OUT line" in line for line in errors)
    outputs = list(runner.log_lines(handle, "streams", 0, streams=Stream.STDOUT))
    assert any("OUT line 0" in line for line in outputs) and not any("ERR " in line for line in outputs)
    later = datetime.datetime.now() + datetime.timedelta(hours=1)
    assert list(runner.log_lines(handle, "streams", 0, since=later)) == []
    earlier = datetime.datetime.now() - datetime.timedelta(hours=1)
    assert list(runner.log_lines(handle, "streams", 0, until=earlier)) == []


def test_copy_env_and_env_keep_torchx_meanings_and_reach_the_container_byte_for_byte(
    runner: Runner, scheduler: DockerScheduler, test_image: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tricky = "a 'b' \"c\" $HOME\nd"
    monkeypatch.setenv("ECHO_COPIED", tricky)
    monkeypatch.setenv("ECHO_BOTH", "from the shell")
    monkeypatch.setenv("ECHO_NOT_COPIED_", "x")
    app = app_of(test_image, JOBS / "env_and_caps.py", env={"ECHO_ROLE": "from the role"})
    cfg = {"copy_env": ["ECHO_COPIED", "ECHO_B*"], "env": {"ECHO_BOTH": "from -cfg env", "ECHO_ROLE": "from -cfg env",
                                                          "ECHO_CFG": "x:y"}}
    handle = runner.run(app, "local_docker", cfg=cfg)

    assert wait(runner, handle) == AppState.SUCCEEDED
    line = next(line for line in runner.log_lines(handle, "env_and_caps", 0) if "ENV {" in line)
    # copy_env's globs, then -cfg env over them, then the role's own env over both.
    assert json.loads(line.split("ENV ", 1)[1]) == {"env": {"ECHO_COPIED": tricky, "ECHO_BOTH": "from -cfg env",
                                            "ECHO_ROLE": "from the role", "ECHO_CFG": "x:y"}, "all_caps": False}


def test_privileged_containers_get_every_capability_or_the_engine_says_why_not(
    runner: Runner, scheduler: DockerScheduler, test_image: Any, docker_client: Any
) -> None:
    app = app_of(test_image, JOBS / "env_and_caps.py")
    try:
        handle = runner.run(app, "local_docker", cfg={"privileged": True})
    except EngineError as error:
        # An engine that itself runs without every capability (this sandbox's) cannot give them.
        assert "unable to apply caps" in str(error) and "\n" not in str(error)
        assert not docker_client.containers.list(all=True, filters={"label": "torchx_ext.app_name=env_and_caps"})
        return
    assert wait(runner, handle) == AppState.SUCCEEDED
    line = next(line for line in runner.log_lines(handle, "env_and_caps", 0) if "ENV {" in line)
    assert json.loads(line.split("ENV ", 1)[1])["all_caps"] is True

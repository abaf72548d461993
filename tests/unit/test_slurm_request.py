"""slurm's pure parts: -cfg checks, the batch script, Slurm's states in ours, and the plan a
task makes inside what Slurm gave it (on fixture trees)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from torchx import specs

from tests.conftest import MachineRoot
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.launcher.worker_binding import plan_workers
from torchx_ext.numa.cpulist import parse_cpulist
from torchx_ext.schedulers.common.states import State
from torchx_ext.schedulers.slurm.client import gpus_in_sinfo
from torchx_ext.schedulers.slurm.view import (
    SLURM_STATES,
    forgotten_job_state,
    parse_sacct,
    parse_squeue,
    replica_state,
    slurm_job,
)
from torchx_ext.schedulers.slurm.options import gpu_type_of, partition_of, sbatch_options, with_whole_nodes
from torchx_ext.schedulers.slurm.driver_core import StepShape, is_retried, reruns, srun_argv
from torchx_ext.schedulers.slurm.records import SlurmJobDir
from torchx_ext.schedulers.slurm.request import SlurmJobRequest
from torchx_ext.schedulers.slurm.build import build_request, describe_request
from torchx_ext.schedulers.slurm.request import requeues
from torchx_ext.schedulers.slurm.step import record_app_requeue, record_first_of_incident, record_requeue

EVERY_STATE = {
    "PENDING": State.PENDING, "CONFIGURING": State.PENDING, "RUNNING": State.RUNNING, "COMPLETING": State.RUNNING,
    "COMPLETED": State.SUCCEEDED, "FAILED": State.FAILED, "CANCELLED": State.CANCELLED,
    "CANCELLED by 0": State.CANCELLED, "TIMEOUT": State.FAILED, "NODE_FAIL": State.FAILED,
    "OUT_OF_MEMORY": State.FAILED, "PREEMPTED": State.FAILED, "REQUEUED": State.PENDING,
    "SUSPENDED": State.RUNNING, "BOOT_FAIL": State.FAILED, "DEADLINE": State.FAILED,
}


def built(app: specs.AppDef, **cfg: object) -> SlurmJobRequest:
    return build_request(app, job_dir="/shared/jobs/train-x", cwd="/home/me", interpreter="/venv/bin/python",
                         options=sbatch_options(cfg), exclusive=bool(cfg.get("exclusive")))


def request_for(app: specs.AppDef, **cfg: object) -> str:
    return built(app, **cfg).script


# What Slurm sets in a batch job of 3 nodes of 32 CPUs (a heterogeneous one: per component).
BATCH_ENV = {"SLURM_JOB_NUM_NODES": "3", "SLURM_CPUS_ON_NODE": "32", **{
    f"SLURM_{name}_HET_GROUP_{i}": value for i in range(2)
    for name, value in (("JOB_NUM_NODES", str(3 - i)), ("CPUS_ON_NODE", "32"))}}


def step_of(request: SlurmJobRequest, position: int = 0, env: dict[str, str] = BATCH_ENV) -> str:
    """The role's step as the driver runs it (one argv; joined here to look for its words)."""
    role = request.roles[position]
    return " ".join(srun_argv(StepShape.of(role, position), job_path=request.job_dir, interpreter=request.interpreter, env=env,
                              heterogeneous=request.heterogeneous, exclusive=request.exclusive))


@pytest.mark.parametrize("slurm_state, state", EVERY_STATE.items())
def test_every_slurm_state_maps(slurm_state: str, state: State) -> None:
    assert slurm_job(slurm_state).state is state


def test_ends_exit_codes_cannot_tell_say_what_happened() -> None:
    assert "time limit" in slurm_job("TIMEOUT").message
    assert "out of memory" in slurm_job("OUT_OF_MEMORY").message
    assert slurm_job("CANCELLED by 1000").message == "cancelled by uid 1000"
    assert slurm_job("PENDING", "Resources").message == "pending: Resources"
    assert set(EVERY_STATE) - {"CANCELLED by 0"} <= set(SLURM_STATES)


def test_a_heterogeneous_job_runs_while_a_component_runs_and_ends_with_the_worst() -> None:
    assert parse_sacct("12+0|COMPLETED\n12+1|RUNNING\n13|CANCELLED by 0\n")["12"].state is State.RUNNING
    assert parse_sacct("12+0|COMPLETED\n12+1|FAILED\n")["12"].state is State.FAILED
    assert parse_sacct("13|CANCELLED by 0\n")["13"].state is State.CANCELLED
    assert parse_squeue("14|PENDING|Priority\n")["14"].message == "pending: Priority"


def test_replicas_of_a_cancelled_job_are_cancelled_whatever_they_exited_with() -> None:
    assert replica_state(State.CANCELLED, True, 1) is State.CANCELLED
    assert replica_state(State.CANCELLED, True, None) is State.CANCELLED
    assert replica_state(State.RUNNING, True, 7) is State.FAILED
    assert replica_state(State.RUNNING, False, None) is State.PENDING
    assert replica_state(State.SUCCEEDED, False, None) is None  # an elastic job's unallocated node


def test_a_forgotten_job_ends_as_its_exit_records_say() -> None:
    assert forgotten_job_state([0, 0], cancelled=False).state is State.SUCCEEDED
    assert forgotten_job_state([0, 3], cancelled=False).state is State.FAILED
    assert "no exit record" in forgotten_job_state([0, None], cancelled=False).message
    assert forgotten_job_state([0, 1], cancelled=True).state is State.CANCELLED


def test_one_role_is_one_plain_job_with_one_step_told_its_resources_again() -> None:
    request = built(ddp(script="train.py", j="2:4x8", cpu=16, gpu=8, memMB=4096), partition="gpu", time="1:00:00")
    script = request.script

    assert "#SBATCH --nodes=2-4" in script and "hetjob" not in script
    assert "#SBATCH --partition=gpu" in script and "#SBATCH --time=1:00:00" in script
    # The script's last line runs the driver; its steps are the driver's (no shell in between).
    assert script.splitlines()[-1] == "exec /venv/bin/python -m torchx_ext.schedulers.slurm.driver /shared/jobs/train-x"
    assert "srun" not in script.split("#SBATCH")[-1]
    # The dry-run says the step as the driver will run it, Slurm's values by their names.
    assert "srun --nodes=${SLURM_JOB_NUM_NODES} --ntasks=${SLURM_JOB_NUM_NODES} " in describe_request(request)
    step = step_of(request)
    for option in ("--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--cpus-per-task=16", "--mem=4096M",
                   "--gpus-per-node=8", "--output=/shared/jobs/train-x/train-%t.out"):
        assert f" {option} " in step
    assert step.endswith("-m torchx_ext.schedulers.slurm.step /shared/jobs/train-x train")


def test_hot_spares_get_nodes_of_their_own_and_a_step_that_outlives_a_lost_replica() -> None:
    request = built(ddp(script="train.py", j="2x1", spares=1))

    assert "#SBATCH --nodes=3" in request.script
    assert "--kill-on-bad-exit=0" in step_of(request)


def test_min_replicas_above_num_replicas_is_refused_in_one_line_before_sbatch() -> None:
    app = specs.AppDef("a", roles=[specs.Role("r", image="", entrypoint="echo", num_replicas=1, min_replicas=2)])

    with pytest.raises(InvalidArgumentError, match=r"^role 'r': min_replicas 2 is not within 1\.\.1 \(num_replicas\)$"):
        request_for(app)


def test_a_fixed_role_without_retries_is_one_step_that_ends_with_its_first_failed_task() -> None:
    request = built(ddp(script="train.py", j="2x1"))

    assert "--kill-on-bad-exit=1" in step_of(request) and not is_retried(request.roles[0].policy)


@pytest.mark.parametrize("j, max_retries, policy, kill_on_bad_exit, step_reruns", [
    # torchx's default: a lost node ends the step, and every node starts again
    ("2x1", 2, specs.RetryPolicy.APPLICATION, "1", 2),
    # dist.ddp's: the step program starts its replica again in place; the step runs again only
    # after Slurm requeued the job
    ("2x1", 2, specs.RetryPolicy.REPLICA, "1", 0),
    # the survivors carry on; enough of them done is success
    ("1:2x1", 0, specs.RetryPolicy.REPLICA, "0", 0),
])
def test_a_role_with_retries_or_elastic_runs_its_step_again_after_a_failure(
    j: str, max_retries: int, policy: specs.RetryPolicy, kill_on_bad_exit: str, step_reruns: int
) -> None:
    app = ddp(script="train.py", j=j, max_retries=max_retries)
    app.roles[0].retry_policy = policy
    request = built(app)
    role = request.roles[0]

    assert f"--kill-on-bad-exit={kill_on_bad_exit}" in step_of(request)
    assert is_retried(role.policy) and reruns(role.policy) == step_reruns
    assert role.policy.carries_on_short == (kill_on_bad_exit == "0") and request.app_restarts is None


def test_several_roles_are_one_heterogeneous_component_each() -> None:
    app = specs.AppDef("two", roles=[specs.Role("trainer", "img", entrypoint="python", num_replicas=3),
                                     specs.Role("reader", "img", entrypoint="python", num_replicas=1)])
    request = built(app)

    assert request.script.count("#SBATCH hetjob") == 1 and request.heterogeneous
    assert " --het-group=0 " in step_of(request, 0) and " --het-group=1 " in step_of(request, 1)
    assert " --nodes=2 " in step_of(request, 1)  # its component's nodes (SLURM_JOB_NUM_NODES_HET_GROUP_1)


def two_roles(policy: specs.RetryPolicy, trainer_retries: int, reader_retries: int) -> specs.AppDef:
    return specs.AppDef("two", roles=[
        specs.Role("trainer", "img", entrypoint="python", num_replicas=2, max_retries=trainer_retries,
                   retry_policy=policy),
        specs.Role("reader", "img", entrypoint="python", num_replicas=1, max_retries=reader_retries,
                   retry_policy=policy)])


def test_an_app_of_several_roles_asking_application_starts_again_as_a_whole(tmp_path: Path) -> None:
    request = built(two_roles(specs.RetryPolicy.APPLICATION, 3, 2))

    # Every role's step started together and stopped together (driver.py), the least max_retries
    # of the roles, as torchx's Volcano and JobSet count.
    assert request.app_restarts == 2
    (tmp_path / "batch.sh").write_text(request.script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "batch.sh")]).returncode == 0
    # REPLICA: each role's own step, started again alone (by the step program, in place).
    assert built(two_roles(specs.RetryPolicy.REPLICA, 3, 2)).app_restarts is None


def test_a_requeued_app_is_one_more_restart_of_the_whole_app(tmp_path: Path) -> None:
    request = build_request(two_roles(specs.RetryPolicy.APPLICATION, 2, 2), job_dir=str(tmp_path), cwd="/home/me",
                            interpreter="/venv/bin/python", options=[])
    job = SlurmJobDir(tmp_path)
    job.request.write_text(request.to_json())
    job.restarts("reader").write_text("1")  # the reader failed the app once before

    assert record_app_requeue(job, max_restarts=2) == 2
    assert job.read_restarts("trainer") == 1 and job.read_restarts("reader") == 1
    with pytest.raises(SystemExit, match=r"restart 3 of the app, over its max_retries \(2\)"):
        record_app_requeue(job, max_restarts=2)
    assert job.read_restarts("trainer") == 1


HOST_KILLED = "replica t/0 (node1) was killed by signal 9 (SIGKILL)"
PEER_LOST_STORE = "replica t/1 (node2) exited with code 1: lost the rendezvous store at node1:29500: its connection closed"
PEER_FAILED = "replica t/1 (node2) exited with code 1: gloo: connection closed by peer"


@pytest.mark.parametrize("first, then, said", [
    (HOST_KILLED, PEER_LOST_STORE, HOST_KILLED),  # the peer's loss is the consequence
    (PEER_LOST_STORE, HOST_KILLED, HOST_KILLED),  # the same, the peer quicker to say it
    (PEER_FAILED, HOST_KILLED, HOST_KILLED),  # a killed replica is a cause whenever it is said
    (HOST_KILLED, PEER_FAILED, HOST_KILLED),
], ids=["host-first", "peer-first", "killed-after-a-failure", "failure-after-a-kill"])
def test_the_last_failure_said_is_the_incidents_cause_in_either_order(
    tmp_path: Path, first: str, then: str, said: str
) -> None:
    path = tmp_path / "t.last_failure"
    record_first_of_incident(path, first, killed="killed by signal" in first)
    record_first_of_incident(path, then, killed="killed by signal" in then)
    assert path.read_text() == said


def test_user_arguments_never_reach_the_script() -> None:
    script = request_for(ddp("$(rm -rf ~)", "a'b", script="train.py", j="1x1", env={"X": "`id`"}))
    assert "rm -rf" not in script and "`id`" not in script and "a'b" not in script


def test_exclusive_plans_the_whole_node() -> None:
    request = built(ddp(script="train.py", j="2x2"), exclusive=True)
    assert "#SBATCH --exclusive" in request.script and " --cpus-per-task=32 " in step_of(request)


@pytest.mark.parametrize("cfg, named", [
    ({"time": "abc"}, "invalid time 'abc'"),
    ({"mail_type": "END,SOMETIMES"}, "SOMETIMES"),
    ({"mail-type": "END,SOMETIMES"}, "SOMETIMES"),
    ({"mail-user": "a@b", "mail_user": "c@d"}, "mail-user='a@b' and mail_user='c@d' differ"),
    ({"comment": "two\nlines"}, "one line"),
    ({"partition": "a\n#SBATCH --x"}, "one line"),
    ({"sbatch_args": ["--nodes=9"]}, "--nodes is set from the app"),
    ({"sbatch_args": ["signal"]}, "expected --name=value"),
])
def test_bad_cfg_is_one_line_naming_the_value(cfg: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match="^[^\n]*$") as raised:
        sbatch_options(cfg)
    assert named in str(raised.value)


def test_torchx_spellings_and_ours_give_the_same_options_and_a_comment_is_one_sbatch_word() -> None:
    torchx_cfg = {"comment": 'run "a" #1 \\ it\'s', "mail-user": "me@example.com", "mail-type": "END,FAIL"}
    ours = {"comment": 'run "a" #1 \\ it\'s', "mail_user": "me@example.com", "mail_type": "END,FAIL"}

    assert sbatch_options(torchx_cfg) == sbatch_options(ours) == [
        '--comment="run \\"a\\" #1 \\\\ it\'s"', "--mail-user=me@example.com", "--mail-type=END,FAIL"]


def test_other_sbatch_options_pass_through() -> None:
    assert sbatch_options({"sbatch_args": ["--signal=B:USR1@60", "--requeue"], "qos": "high"}) == [
        "--qos=high", "--signal=B:USR1@60", "--requeue"]


def test_a_task_plans_inside_the_cpus_and_gpus_slurm_gave_it(machine_root: MachineRoot) -> None:
    # Slurm gave the task half of socket 1 and GPUs 4 and 5 (it sets CUDA_VISIBLE_DEVICES).
    given = parse_cpulist("56-83,168-195")
    root = str(machine_root("dgx-h100"))
    plan, _ = plan_workers(2, "node", sysfs_root=root, allowed_cpus=given, env={"CUDA_VISIBLE_DEVICES": "4,5"},
                           device_kind="gpu")

    assert all(rank.cpus <= given for rank in plan.ranks)
    assert [rank.numa_node for rank in plan.ranks] == [1, 1] and not plan.warnings
    # GPUs of the other socket than the CPUs given: never widened, said.
    far, _ = plan_workers(2, "node", sysfs_root=root, allowed_cpus=given, env={"CUDA_VISIBLE_DEVICES": "0,1"},
                          device_kind="gpu")
    assert all(rank.cpus <= given for rank in far.ranks) and far.warnings


@pytest.mark.parametrize("j, max_retries, requeue", [
    ("2x1", 1, "--requeue"),  # Slurm starts it again on other nodes after a node failed
    ("2x1", 0, "--no-requeue"),  # it fails, NODE_FAIL, whatever the cluster's JobRequeue
    ("1:2x1", 0, "--no-requeue"),
])
def test_slurm_requeues_a_job_whose_node_failed_only_with_restarts_left(j: str, max_retries: int, requeue: str) -> None:
    request = built(ddp(script="train.py", j=j, max_retries=max_retries))
    script = request.script

    assert f"#SBATCH {requeue}\n" in script
    assert script.index(f"#SBATCH {requeue}") < script.index("#SBATCH --nodes=")
    assert requeues(request) == (requeue == "--requeue")
    # The driver counts a requeued run as a restart of a role it watches.
    assert is_retried(request.roles[0].policy) == (j != "2x1" or max_retries > 0)


def test_a_users_own_requeue_option_comes_after_ours_and_wins() -> None:
    request = built(ddp(script="train.py", j="2x1", max_retries=1), sbatch_args=["--no-requeue"])
    assert request.script.index("#SBATCH --requeue") < request.script.index("#SBATCH --no-requeue")
    assert not requeues(request)


def test_a_requeued_run_is_one_more_restart_within_max_retries(tmp_path: Path) -> None:
    request = build_request(ddp(script="train.py", j="2x1", max_retries=1), job_dir=str(tmp_path), cwd="/home/me",
                            interpreter="/venv/bin/python", options=[])
    job = SlurmJobDir(tmp_path)
    job.request.write_text(request.to_json())
    job.exit("train", 1).write_text(json.dumps({"exit_code": 1, "at": 5.0, "node": "n2"}))

    assert record_requeue(job, "train", max_retries=1) == 1
    assert job.read_restarts("train") == 1
    assert job.read_last_failure("train") == (
        "Slurm requeued the job (a node failure, a preemption or scontrol requeue): replica train/1 (n2) exited with code 1")
    with pytest.raises(SystemExit, match=r"restart 2 of role train, over its max_retries \(1\)"):
        record_requeue(job, "train", max_retries=1)
    assert job.read_restarts("train") == 1  # the run that did not happen is not counted


@pytest.mark.parametrize("h, cfg, asked", [
    ("dgx_h100", {}, "--gpus-per-node=h100:8"),  # the named resource's GPU model is the GRES type
    ("dgx_h100", {"gpu_type": "any"}, "--gpus-per-node=8"),
    ("dgx_h100", {"gpu_type": "H100_80GB"}, "--gpus-per-node=H100_80GB:8"),  # as the cluster names it
    (None, {}, "--gpus-per-node=2"),  # --gpu 2 carries no type
])
def test_gpus_are_asked_per_node_with_the_gres_type_when_there_is_one(h: str | None, cfg: dict[str, str],
                                                                      asked: str) -> None:
    app = ddp(script="train.py", j="2x2", h=h) if h else ddp(script="train.py", j="2x2", gpu=2)
    request = build_request(app, job_dir="/shared/jobs/train-x", cwd="/home/me", interpreter="/venv/bin/python",
                            options=sbatch_options(cfg),
                            gpu_types=[gpu_type_of(cfg.get("gpu_type"), role.resource) for role in app.roles])
    assert f"#SBATCH {asked}\n" in request.script and f" {asked} " in step_of(request)
    assert request.gpus_asked() == [asked]  # on sbatch's command line too
    assert "--gpus-per-task" not in request.script  # every rank sees its node's GPUs (NVLink peers too)


def test_a_bad_gpu_type_is_one_line_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match=r"invalid gpu_type 'h100:8': expected a GRES type"):
        gpu_type_of("h100:8", ddp(script="train.py", j="1x2", gpu=2).roles[0].resource)


@pytest.mark.parametrize("options, env, partition", [
    (["--partition=gpu"], {}, "gpu"),
    (["--partition=gpu", "-p batch"], {}, "batch"),  # sbatch_args come last and win
    ([], {"SBATCH_PARTITION": "long"}, "long"),
    ([], {}, None),  # the cluster's default
])
def test_the_partition_is_the_one_sbatch_will_use(options: list[str], env: dict[str, str], partition: str | None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SBATCH_PARTITION", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert partition_of(options) == partition


def test_whole_nodes_come_before_a_users_sbatch_args() -> None:
    cfg = {"sbatch_args": ["--oversubscribe"]}
    options = with_whole_nodes(sbatch_options(cfg), cfg)
    assert options == ["--exclusive", "--oversubscribe"]


@pytest.mark.parametrize("sinfo, partition, gpu_type, most", [
    ("debug*|gpu:h100:8(S:0-1)\n", None, "", 8),
    ("debug*|gpu:h100:8(S:0-1)\n", None, "a100", 0),
    ("cpu*|(null)\ngpu|gpu:4\ngpu|gpu:a100:2,gpu:4(S:0)\n", "gpu", "", 6),  # the best node of the partition
    ("cpu*|(null)\ngpu|gpu:4\n", None, "", 0),  # the default partition has none
])
def test_the_most_gpus_a_node_has_come_from_sinfo(sinfo: str, partition: str | None, gpu_type: str, most: int) -> None:
    assert gpus_in_sinfo(sinfo, partition, gpu_type) == most

"""Losing a replica, on every scheduler: the engine's own way of losing a node, mid-training.

The job (jobs/checkpointed.py) checkpoints every step; a restarted attempt resumes from the
checkpoint, so the checkpoint's history shows every step that counted, and the world size each
ran at.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.cases import EVERY_BACKEND, EVERY_CASE, NO_ROOM_FOR_A_SPARE, supporting
from torchx_ext.schedulers.backends import ELASTIC, SPARES
from tests.conformance.conftest import JOBS, SchedulerUnderTest
from tests.conformance.jobs_api import status_until, wait, wait_for_line
from tests.fixtures.docker_engine import engine_log_size, engine_pid, engine_said_since
from tests.helpers import record_restart
from torchx_ext.components.dist import ddp
from torchx_ext.stack_request import STACKS_BEGIN, STACKS_END

STEPS = 24
STEP_S = 0.25
SURVIVING = EVERY_CASE


def _history(directory: Path) -> list[list[Any]]:
    checkpoint = directory / "checkpoint.json"
    try:
        return list(json.loads(checkpoint.read_text())["history"])
    except (OSError, ValueError, KeyError):
        return []


def _log_lines(runner: Runner, handle: str, role: str, replicas: int) -> list[str]:
    return [f"[{role}/{replica}] {line.rstrip()}" for replica in range(replicas)
            for line in runner.log_lines(handle, role, replica)]


def _logs(runner: Runner, handle: str, role: str, replicas: int, tmp_path: Path) -> str:
    """Where every replica's log was written for a failure's reader (the launchers' lines say which
    wait took the time; a failed test's directory is kept), and its last lines."""
    lines = _log_lines(runner, handle, role, replicas)
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    return f"the job's log: {path}, ending\n" + "\n".join(lines[-40:])


def _held_restart_stacks(runner: Runner, handle: str, replicas: int) -> str:
    """The threads' stacks a launcher prints once its restart is held (hang_watch.py's
    ``RESTART_STALL_S``), in full: where a slow restart waited."""
    lines = _log_lines(runner, handle, "store_stepped", replicas)
    starts = [index for index, line in enumerate(lines) if "has not rendezvoused again; its threads' stacks" in line]
    if not starts:
        return "no launcher printed its stacks (none was held 10 s)"
    return "\n".join("\n".join(lines[start:start + 120]) for start in starts)


def _wait_for_step(directory: Path, step: int, timeout_s: float = 120) -> float:
    """When the checkpoint first held ``step`` steps (polled)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(_history(directory)) >= step:
            return time.time()
        time.sleep(0.05)
    raise AssertionError(f"the job did not reach step {step} in {timeout_s} s: history {_history(directory)}")


def _training(runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, j: str,
              max_retries: int, spares: int = 0, steps: int = STEPS,
              cfg: dict[str, Any] | None = None, job: str = "checkpointed.py",
              job_args: tuple[str, ...] = (), env: dict[str, str] | None = None,
              hang_timeout: str | None = None) -> tuple[str, str, Path]:
    """(handle, app id, checkpoint directory) of the checkpointing job, once 3 steps are done."""
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    args = dict(scheduler.component_args)
    args["mounts"] = [*args.get("mounts", []), *scheduler.shared_dir_mounts(directory)]
    if env:
        args["env"] = {**args.get("env", {}), **env}
    app = ddp(str(directory), str(steps), str(STEP_S), *job_args, script=str(JOBS / job), j=j,
              max_retries=max_retries, spares=spares, hang_timeout=hang_timeout, **args)
    handle: str = runner.run(app, scheduler.name, cfg={**scheduler.cfg, **(cfg or {})})
    _wait_for_step(directory, 3)
    return handle, parse_app_handle(handle).app_id, directory


def _every_step_once(runner: Runner, handle: str, directory: Path, steps: int = STEPS) -> list[list[Any]]:
    """The checkpoint's history once the job SUCCEEDED, every step in it once, none skipped."""
    assert wait(runner, handle, timeout_s=240) == AppState.SUCCEEDED
    history = _history(directory)
    assert [entry[0] for entry in history] == list(range(steps)), history
    return history


def _one_lost(runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, j: str, max_retries: int,
              replica_id: int) -> tuple[str, str, list[list[Any]]]:
    """(handle, app id, history) of the checkpointing job that lost ``replica_id`` and succeeded."""
    handle, app_id, directory = _training(runner, scheduler, tmp_path, j, max_retries)
    scheduler.kill_replica(app_id, "checkpointed", replica_id)
    return handle, app_id, _every_step_once(runner, handle, directory)


@pytest.mark.parametrize("scheduler", SURVIVING, indirect=True)
def test_losing_any_replica_with_max_retries_resumes_from_the_checkpoint_at_full_size(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "2x1", max_retries=2)
    scheduler.kill_replica(app_id, "checkpointed", 1)  # not the store's host
    resumed = len(_history(directory))
    _wait_for_step(directory, resumed + 3)
    scheduler.kill_replica(app_id, "checkpointed", 0)  # the store's host

    history = _every_step_once(runner, handle, directory)
    assert history[-1][1] == 2  # back at full size after each loss
    assert json.loads((directory / "checkpoint.json").read_text())["state"] == STEPS
    status = runner.status(handle)
    assert status is not None and status.num_restarts >= 2, status
    assert status.msg.startswith(f"{status.num_restarts} restarts"), status.msg
    if scheduler.keeps_lost_replicas_end:
        assert "replica checkpointed/0" in status.msg and "killed" in status.msg, status.msg
    assert scheduler.leftovers(app_id) == []


# NCCL over InfiniBand, and a rank busy outside a collective, do not notice a dead peer: gloo's
# reset connections would hide the rendezvous' part. Here the ranks meet through the store.
# Both c10d handlers (the launcher reads $PET_C10D_HANDLER); the engines' own loss, on the default.
@pytest.mark.parametrize("scheduler, handler", [("local_cwd", "arrivals"), ("local_cwd", "torch"),
                                                ("local_cwd-warm", "arrivals"), ("local_docker", "arrivals")],
                         indirect=["scheduler"])
def test_a_worker_that_fails_once_restarts_every_node_within_10_s_where_peers_notice_nothing(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, handler: str
) -> None:
    engine_mark = engine_log_size() if scheduler.name == "local_docker" else None
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "3x1", max_retries=1, steps=16,
                                          job="store_stepped.py", job_args=("1", "8"),
                                          env={"PET_C10D_HANDLER": handler})
    deadline = time.monotonic() + 60
    while not (directory / "failed_at").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    failed_at = float((directory / "failed_at").read_text())

    history = _every_step_once(runner, handle, directory, steps=16)
    after = [entry for entry in history if entry[2] > failed_at]
    record_restart("a failed worker to the next step", after[0][2] - failed_at if after else float("inf"), 10)
    assert after and after[0][2] - failed_at <= 10, (
        failed_at, history, _logs(runner, handle, "store_stepped", 3, tmp_path),
        _held_restart_stacks(runner, handle, 3), "" if engine_mark is None else engine_said_since(engine_mark))
    assert history[-1][1] == 3, history
    # Each launcher says where its restart's time went (the line a reader of a slow restart looks for).
    again = [line for line in _log_lines(runner, handle, "store_stepped", 3) if "rendezvous again" in line]
    assert sorted(line.split("]")[0] for line in again) == [f"[store_stepped/{replica}" for replica in range(3)], again
    assert all(" of 3, joined in " in line for line in again), again
    assert scheduler.leftovers(app_id) == []


STALL_S = 15.0


# Docker's engine answers its containers' name lookups (the store host's name among them): stopped,
# as a busy or wedged engine looks, it answers none, while the containers run on. A worker failing
# then costs its one restart in place; no node is counted lost for a lookup.
@pytest.mark.parametrize("scheduler", ["local_docker"], indirect=True)
def test_a_worker_that_fails_while_the_engine_is_stopped_15_s_costs_one_restart_and_the_stall_plus_10_s(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    dockerd, engine_mark = engine_pid(), engine_log_size()
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "3x1", max_retries=1, steps=100,
                                          job="store_stepped.py", job_args=("1", "8"))
    os.kill(dockerd, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        deadline = stopped + 30
        while not (directory / "failed_at").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(max(0.0, stopped + STALL_S - time.monotonic()))
    finally:
        os.kill(dockerd, signal.SIGCONT)
    answers_again = time.time()
    assert (directory / "failed_at").exists(), f"rank 1 did not fail during the stall: {_history(directory)}"
    failed_at = float((directory / "failed_at").read_text())

    history = _every_step_once(runner, handle, directory, steps=100)
    logs = _logs(runner, handle, "store_stepped", 3, tmp_path)
    after = [entry for entry in history if entry[2] > failed_at]
    # The containers and the test share this host's clock.
    record_restart("a failed worker to the next step (the engine back + 10 s)",
                   after[0][2] - failed_at if after else float("inf"), answers_again - failed_at + 10)
    assert after and after[0][2] <= answers_again + 10, (failed_at, answers_again, after[:3], logs,
                                                         _held_restart_stacks(runner, handle, 3),
                                                         engine_said_since(engine_mark))
    lines = _log_lines(runner, handle, "store_stepped", 3)
    assert not [line for line in lines if "lost node" in line or "lost the rendezvous store" in line], logs
    again = [line for line in lines if "rendezvous again" in line]
    assert sorted(line.split("]")[0] for line in again) == [f"[store_stepped/{replica}" for replica in range(3)], again
    assert history[-1][1] == 3, history
    assert scheduler.leftovers(app_id) == []


# Where the scheduler hosts the rendezvous store outside the replicas.
@pytest.mark.parametrize("scheduler", ["local_cwd"], indirect=True)
def test_losing_the_store_hosts_replica_costs_only_that_replica_a_retry(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, app_id, history = _one_lost(runner, scheduler, tmp_path, "2x1", max_retries=1, replica_id=0)
    assert history[-1][1] == 2, history
    status = runner.status(handle)
    # Replica 0 started again; replica 1 restarted its workers in place (a gang restart: 2).
    assert status is not None and status.num_restarts == 1, status
    assert scheduler.leftovers(app_id) == []


@pytest.mark.feature(ELASTIC)
@pytest.mark.parametrize("scheduler", SURVIVING, indirect=True)
def test_an_elastic_job_without_retries_carries_on_with_the_survivor(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, app_id, history = _one_lost(runner, scheduler, tmp_path, "1:2x1", max_retries=0, replica_id=1)
    if scheduler.cfg.get("backend") == "volcano":
        # Volcano recreates a deleted pod (it has no action that leaves it lost): the survivor
        # carried on, restarting its workers (a pause), and the new pod joined it.
        assert history[-1][1] == 2 and max(b[2] - a[2] for a, b in zip(history, history[1:])) > 2, history
    else:
        assert history[0][1] == 2 and history[-1][1] == 1, history
    assert scheduler.leftovers(app_id) == []


@pytest.mark.parametrize("scheduler", SURVIVING, indirect=True)
def test_a_fixed_job_without_retries_fails_within_30_s_naming_the_lost_replica(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, app_id, _ = _training(runner, scheduler, tmp_path, "2x1", max_retries=0)
    scheduler.kill_replica(app_id, "checkpointed", 1)
    killed_at = time.monotonic()

    failed = status_until(runner, handle, lambda status: status.is_terminal(), timeout_s=60)
    record_restart("a kill to FAILED", time.monotonic() - killed_at, 30)
    assert failed.state == AppState.FAILED and time.monotonic() - killed_at <= 30, failed
    assert "checkpointed/1" in failed.msg, failed.msg
    assert scheduler.leftovers(app_id) == []


# The frozen cases: every case on local_cwd, where they are cheapest, and one (a frozen peer,
# with retries) on every other scheduler (kubernetes: its Job backend; the probe and the kubelet
# are the same for JobSet and Volcano); TORCHX_EXT_FAULT_MATRIX=all runs every case everywhere.
EVERY_CASE_EVERYWHERE = os.environ.get("TORCHX_EXT_FAULT_MATRIX") == "all"
FREEZE_MATRIX = SURVIVING if EVERY_CASE_EVERYWHERE else ["local_cwd"]
# And in a Slurm allocation, where the step program, not the batch job, handles the freeze; and
# the warm starts, whose launchers are forks (on Slurm, not the step program's children).
FROZEN_PEER = SURVIVING if EVERY_CASE_EVERYWHERE else [*EVERY_BACKEND, "local_cwd-warm", "slurm-allocation",
                                                       "slurm-allocation-warm"]


def _freeze(scheduler: SchedulerUnderTest, app_id: str, replica_id: int) -> None:
    assert scheduler.freeze_replica is not None
    scheduler.freeze_replica(app_id, "checkpointed", replica_id)


@pytest.mark.parametrize(
    "scheduler, replica_id",
    [pytest.param(name, 1, id=f"{name}-peer") for name in FROZEN_PEER]
    + [pytest.param(name, 0, id=f"{name}-store host") for name in FREEZE_MATRIX],
    indirect=["scheduler"],
)
def test_a_frozen_replica_is_replaced_and_every_step_is_done_once(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, replica_id: int
) -> None:
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "2x1", max_retries=1)
    _freeze(scheduler, app_id, replica_id)
    history = _every_step_once(runner, handle, directory)
    assert history[-1][1] == 2, history
    status = runner.status(handle)
    assert status is not None and status.num_restarts >= 1, status
    if scheduler.store_outside_replicas:  # only the frozen one restarted
        assert status.num_restarts == 1, status
    if scheduler.keeps_lost_replicas_end:
        assert f"replica checkpointed/{replica_id}" in status.msg and "gave no sign of life" in status.msg, status.msg
    assert scheduler.leftovers(app_id) == []


@pytest.mark.parametrize("max_retries", [0, 1])
@pytest.mark.parametrize("scheduler", FREEZE_MATRIX, indirect=True)
def test_an_elastic_job_carries_on_without_a_frozen_replica(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, max_retries: int
) -> None:
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "1:2x1", max_retries=max_retries)
    _freeze(scheduler, app_id, 1)
    history = _every_step_once(runner, handle, directory)
    assert history[0][1] == 2, history
    if max_retries == 0:
        assert history[-1][1] == 1, history
    else:  # the frozen replica was started again: the survivor may have carried on alone meanwhile
        assert {world for _, world, _ in history} <= {1, 2}, history
    assert scheduler.leftovers(app_id) == []


@pytest.mark.parametrize("replica_id", [1, 0], ids=["peer", "store host"])
@pytest.mark.parametrize("scheduler", FREEZE_MATRIX, indirect=True)
def test_a_fixed_job_without_retries_fails_within_60_s_of_a_freeze(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, replica_id: int
) -> None:
    handle, app_id, _ = _training(runner, scheduler, tmp_path, "2x1", max_retries=0)
    _freeze(scheduler, app_id, replica_id)
    frozen_at = time.monotonic()
    failed = status_until(runner, handle, lambda status: status.is_terminal(), timeout_s=90)
    record_restart("a freeze to FAILED", time.monotonic() - frozen_at, 60)
    assert failed.state == AppState.FAILED and time.monotonic() - frozen_at <= 60, failed
    # Whoever noticed first: the scheduler (the frozen replica) or the survivor's watchdog.
    assert any(why in failed.msg for why in ("gave no sign of life", "lost node", "lost the rendezvous store")), failed.msg
    assert scheduler.leftovers(app_id) == []


# Hot spares (dist.ddp --spares): where the scheduler starts a lost replica again on its own (not
# the whole gang), the replacement waits as the new spare.
SPARE_CASES = [name for name in [*supporting(SPARES), "local_cwd-warm"] if name not in NO_ROOM_FOR_A_SPARE]
SPARE_STEPS = 160


@pytest.mark.feature(SPARES)
@pytest.mark.parametrize("scheduler", SPARE_CASES, indirect=True)
def test_a_hot_spare_takes_a_frozen_replicas_place_and_the_replacement_waits_as_the_next_spare(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    # Long enough for the frozen replica's replacement to come while the others train.
    # Three pods of a CPU each do not fit the test cluster's 2-CPU node: each asks for 0.6.
    cfg = {"reserved_millicpu": 400} if scheduler.name == "kubernetes" else {}
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "2x1", max_retries=1, spares=1,
                                          steps=SPARE_STEPS, cfg=cfg)
    # The spare is the last replica: replica 0 (where the store may live) trains.
    status_until(runner, handle, lambda status: "1 hot spare waiting: checkpointed[2]" in status.msg)
    spare, victim = 2, 1

    _freeze(scheduler, app_id, victim)

    wait_for_line(runner, handle, "checkpointed", spare, r"step \d+ world 2$", timeout_s=120)  # the spare trains
    replaced = status_until(runner, handle, lambda status: f"hot spare waiting: checkpointed[{victim}]" in status.msg,
                            timeout_s=120)
    assert replaced.num_restarts == 1, replaced
    # Every step so far done once, at full size; the rest of the job would prove nothing more.
    history = _history(directory)
    assert [entry[0] for entry in history] == list(range(len(history))), history
    assert {world for _, world, _ in history} == {2}, history
    runner.cancel(handle)
    assert wait(runner, handle, timeout_s=60) == AppState.CANCELLED
    assert scheduler.leftovers(app_id) == []


def _hung_at(directory: Path, timeout_s: float = 60) -> float:
    """When the hung rank stopped (its own clock: the same host's as the checkpoint's)."""
    deadline = time.monotonic() + timeout_s
    while not (directory / "hung_at").exists():
        assert time.monotonic() < deadline, f"no rank hung in {timeout_s} s: history {_history(directory)}"
        time.sleep(0.05)
    time.sleep(0.05)  # written, not only created
    return float((directory / "hung_at").read_text())


def _stacks_in_log(runner: Runner, handle: str, replica: int) -> str:
    lines = list(runner.log_lines(handle, "hung", replica))
    text = "\n".join(lines)
    assert STACKS_BEGIN in text and STACKS_END in text, text[-3000:]
    return text[text.index(STACKS_BEGIN): text.index(STACKS_END)]


# A rank that hangs alive (rank 1 waits for ever at step 5 of its first attempt, rank 0 waits in the
# step's all-reduce): found by the launcher's watchdog with no code change, every rank's stack in its
# replica's log, and the job goes on from its checkpoint.
@pytest.mark.parametrize("scheduler", EVERY_BACKEND, indirect=True)
def test_a_rank_hung_alive_is_found_and_the_next_step_comes_within_45_s_with_every_stack_logged(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "2x1", max_retries=1, steps=10, job="hung.py",
                                          job_args=("1", "5"), hang_timeout="30")
    hung_at = _hung_at(directory)
    history = _every_step_once(runner, handle, directory, steps=10)
    after = [entry[2] for entry in history if entry[2] > hung_at]
    record_restart("a hang to the next step", after[0] - hung_at if after else float("inf"), 45)
    assert after and 30 <= after[0] - hung_at <= 45, (hung_at, history)
    assert 'hung.py", line' in _stacks_in_log(runner, handle, 1)
    assert "in all_reduce" in _stacks_in_log(runner, handle, 0)
    assert scheduler.leftovers(app_id) == []


# torch's own timer, where the worker uses it: the overrunning worker is ended (its stack logged
# first) and the job goes on; torchrun's agent would end itself with it.
@pytest.mark.parametrize("scheduler", EVERY_BACKEND, indirect=True)
def test_a_worker_that_overruns_its_own_timer_is_ended_and_the_next_step_comes_within_the_timer_and_15_s(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "2x1", max_retries=1, steps=10, job="hung.py",
                                          job_args=("1", "5", "5"), env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1"})
    hung_at = _hung_at(directory)
    history = _every_step_once(runner, handle, directory, steps=10)
    after = [entry[2] for entry in history if entry[2] > hung_at]
    record_restart("an overrun timer to the next step", after[0] - hung_at if after else float("inf"), 5 + 15)
    assert after and after[0] - hung_at <= 5 + 15, (hung_at, history)
    stacks = _stacks_in_log(runner, handle, 1)
    assert stacks.splitlines()[0].startswith(f"{STACKS_BEGIN} timer: ") and 'hung.py", line' in stacks, stacks
    assert scheduler.leftovers(app_id) == []


def _stuck(runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, j: str, max_retries: int,
           how: str = "hung") -> tuple[Any, Path]:
    """(status, checkpoint directory) of a job whose rank 1 hangs (``how``: hung) or raises (failed)
    at step 3 of every attempt, once it has ended FAILED saying it stopped restarting, leaving
    nothing behind. The failing job's ranks meet through the store: a peer does not notice."""
    job, job_args = (("hung.py", ("1", "3", "0", "always")) if how == "hung"
                     else ("store_stepped.py", ("1", "3", "always")))
    handle, app_id, directory = _training(runner, scheduler, tmp_path, j, max_retries=max_retries, steps=10,
                                          job=job, job_args=job_args, hang_timeout="3")
    assert wait(runner, handle, timeout_s=240) == AppState.FAILED
    status = runner.status(handle)
    assert status is not None and f"stopped restarting: 3 attempts in a row {how} at the same point" in status.msg, \
        status
    if how == "failed":
        assert "the last: rank 1: RuntimeError: rank 1 failed at step 3" in status.msg, status
    assert scheduler.leftovers(app_id) == []
    return status, directory


# A job whose every attempt hangs, or fails, at the same step (rank 1 waits for ever, or raises, at
# step 3, resumed from the same checkpoint each time): its launchers stop restarting after 3 such
# attempts, and the scheduler does not start them again, whatever max_retries is left (local_docker:
# the last test below).
@pytest.mark.parametrize("scheduler, how", [(name, how) for name in ("local_cwd", "slurm", "kubernetes")
                                            for how in ("hung", "failed")] + [("kubernetes-volcano", "failed"),
                                                                                 ("kubernetes-jobset", "failed")],
                         indirect=["scheduler"])
def test_attempts_that_keep_hanging_or_failing_at_one_point_end_the_job_before_its_retries_run_out(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, how: str
) -> None:
    status, directory = _stuck(runner, scheduler, tmp_path, "2x1", max_retries=3, how=how)
    # The scheduler started no replica again: a node that stops restarting waits for every node to
    # have seen the stop before it takes the store with it (the other node stops with it, exit 3).
    assert status.num_restarts == 0, status
    assert len(_history(directory)) == 3


# One node: its launcher has no restarts in place, the scheduler starts it again; the attempts it
# kept beside its error file carry over to the next launcher, which stops on the third.
@pytest.mark.parametrize("scheduler, how", [("local_cwd", "hung"), ("slurm", "hung"), ("local_cwd", "failed")],
                         indirect=["scheduler"])
def test_a_one_node_job_that_keeps_hanging_or_failing_at_one_point_stops_on_its_third_attempt(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path, how: str
) -> None:
    status, _ = _stuck(runner, scheduler, tmp_path, "1x2", max_retries=5, how=how)
    assert status.num_restarts == 2, status  # attempts 2 and 3; 3 of max_retries 5 unused


# local_docker's engine restarts a failed container whatever its exit code: each launcher it starts
# finds its replica's attempts stuck and exits 3 at once, so the retries left end with no attempt.
@pytest.mark.parametrize("scheduler", ["local_docker"], indirect=True)
def test_on_local_docker_the_retries_left_after_attempts_stuck_at_one_point_end_with_no_attempt(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    handle, app_id, directory = _training(runner, scheduler, tmp_path, "2x1", max_retries=2, steps=10, job="hung.py",
                                          job_args=("1", "3", "0", "always"), hang_timeout="3")
    assert wait(runner, handle, timeout_s=240) == AppState.FAILED
    status = runner.status(handle)
    assert status is not None and "stopped restarting" in status.msg, status
    lines = [line for line in runner.log_lines(handle, "hung", 1) if "hangs at step" in line]
    assert len(lines) == 3, lines  # three attempts hung; the engine's restarts started none
    assert scheduler.leftovers(app_id) == []

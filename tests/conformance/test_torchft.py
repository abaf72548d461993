"""torchft jobs (``dist.hsdp``) on every scheduler that runs them: a lost replica group costs the
others a step, not a restart, and comes back alone with the live groups' weights.

One job per scheduler goes through the three losses in turn, as the engine loses things: one
group's worker SIGKILLed (its launcher restarts it in place), one group's node frozen (our liveness
removes it and the scheduler starts it again), and the lighthouse lost (the scheduler starts it
again; the groups carry on). The job (jobs/torchft_steps.py) writes every committed step of each
group to a file the test reads as lines arrive, timed on the test's own clock.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import Runner
from torchx.specs import AppState, parse_app_handle

from tests.conformance.cases import NO_ROOM_FOR_A_LIGHTHOUSE, supporting
from tests.conformance.conftest import JOBS, SchedulerUnderTest
from tests.conformance.jobs_api import wait
from tests.helpers import free_port_pair, record_restart
from torchx_ext.components.dist import hsdp
from torchx_ext.schedulers.backends import TORCHFT

# Skipped where the ft extra is missing, but never under CI=true: scripts/test.sh installs it.
needs_torchft = pytest.mark.skipif(os.environ.get("CI") != "true" and importlib.util.find_spec("torchft") is None,
                                   reason="the ft extra (pip install 'torchx_ext[ft]') is not installed")

HEARTBEAT_S = 1.0
SURVIVOR_STALL_S = HEARTBEAT_S + 1
"""A survivor's first step committed without a group whose worker died: within the lighthouse's
heartbeat timeout + 1 s (the dead peer's connections reset, and the next quorum leaves it out)."""
PG_TIMEOUT_S = 5.0
"""The job's process-group timeout (jobs/torchft_steps.py)."""
FROZEN_STALL_S = PG_TIMEOUT_S + HEARTBEAT_S + 1
"""The same after a group's node froze: nothing resets, so a freeze that lands inside the step's
all-reduce (CI saw 5.2 s once; outside it, 1.2 s) holds the survivor for its process group's timeout first."""
BACK_S = 15
"""A group whose worker was killed commits again within this."""
FROZEN_BACK_S = 30
"""A frozen group commits again within this: our liveness takes about 10 s to call it frozen."""
LIGHTHOUSE_STALL_S = 30
"""Both groups commit together again within this of the lighthouse's loss (it is started again; the
groups retry their quorum: TORCHFT_QUORUM_RETRIES)."""
UNCOMMITTED = 2
"""Steps a survivor may leave uncommitted around a loss (the one in flight, and one more at most)."""
STEP_S = 0.1


class Groups:
    """Each group's committed steps, stamped when the test first saw them (its own monotonic clock)."""

    def __init__(self, directory: Path, count: int) -> None:
        self.files = [directory / f"group{group}.jsonl" for group in range(count)]
        self.read = [0] * count
        self.seen: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in range(count)]
        """Committed steps."""
        self.uncommitted: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in range(count)]

    def poll(self) -> None:
        now = time.monotonic()
        for group, path in enumerate(self.files):
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            complete = text[: text.rfind("\n") + 1]
            for line in complete[self.read[group]:].splitlines():
                step = json.loads(line)
                (self.seen if step["committed"] else self.uncommitted)[group].append((now, step))
            self.read[group] = len(complete)

    def until(self, check: Callable[[], bool], timeout_s: float, what: str) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if check():
                return time.monotonic()
            time.sleep(0.05)
        raise AssertionError(f"not within {timeout_s} s: {what}; last steps {self.last()}")

    def after(self, group: int, since: float) -> list[tuple[float, dict[str, Any]]]:
        return [(at, step) for at, step in self.seen[group] if at > since]

    def starts(self, group: int) -> list[str]:
        return list(dict.fromkeys(step["start"] for _, step in self.seen[group]))

    def last(self) -> list[dict[str, Any] | None]:
        return [steps[-1][1] if steps else None for steps in self.seen]

    def hashes(self, group: int, since: float) -> dict[int, str]:
        return {step["step"]: step["hash"] for _, step in self.after(group, since)}


def _when_gone(path: Path, timeout_s: float = 30) -> float:
    deadline = time.monotonic() + timeout_s
    while path.exists():
        assert time.monotonic() < deadline, f"{path} still there after {timeout_s} s: no worker took it"
        time.sleep(0.02)
    return time.monotonic()


def _survivor_goes_on(groups: Groups, lost_at: float, start: str) -> float:
    """Seconds from a loss to the survivor's (group 0's) first step committed without group 1."""
    at = groups.until(lambda: any(step["participants"] == 1 for _, step in groups.after(0, lost_at)), 60,
                      "group 0 committing alone after the loss")
    assert groups.starts(0) == [start], f"group 0 restarted: starts {groups.starts(0)}"
    return at - lost_at


def _back(groups: Groups, group: int, lost_at: float, starts_before: int) -> float:
    """Seconds from a loss to the lost group's first committed step as a new start."""
    at = groups.until(lambda: len(groups.starts(group)) > starts_before and bool(groups.after(group, lost_at)),
                      90, f"group {group} committing again as a new start")
    return at - lost_at


def _uncommitted(groups: Groups, group: int, since: float) -> int:
    return sum(1 for at, _ in groups.uncommitted[group] if at > since)


def _same_weights(groups: Groups, since: float) -> None:
    """Both groups' weights hash the same at every step both committed after ``since``, once there
    are 3 such steps (each group writes a step when it committed it: one group's line of a step
    may reach the test a poll after the other's)."""
    def common() -> list[int]:
        return sorted(set(groups.hashes(0, since)) & set(groups.hashes(1, since)))

    groups.until(lambda: len(common()) >= 3, 30, "3 steps both groups committed after the group came back")
    ours, theirs = groups.hashes(0, since), groups.hashes(1, since)
    assert [step for step in common() if ours[step] != theirs[step]] == [], (ours, theirs)


def losses_cost_a_step_and_the_group_comes_back(
    runner: Runner, scheduler: str, cfg: dict[str, Any], component_args: dict[str, Any], directory: Path,
    kill: Callable[[str, str, int], None], freeze: Callable[[str, str, int], None],
    keeps_logs: bool = True) -> tuple[str, str]:
    """The three losses in turn on a 2-group job (its steps in ``directory``, which every replica
    sees), through ``kill`` and ``freeze`` (app_id, role, replica_id); (handle, app id) of the job,
    which SUCCEEDED."""
    args = dict(component_args)
    args["env"] = {**args.get("env", {}), "RUST_LOG": "warn"}  # torchft's INFO: ten lines a step
    app = hsdp(str(directory), str(STEP_S), script=str(JOBS / "torchft_steps.py"), replicas=2,
               heartbeat_timeout=f"{HEARTBEAT_S:g}s", lighthouse_port=free_port_pair(), max_retries=2, **args)
    handle = runner.run(app, scheduler, cfg=cfg)
    app_id = parse_app_handle(handle).app_id
    groups = Groups(directory, 2)
    groups.until(lambda: all(sum(step["participants"] == 2 for _, step in seen) >= 3 for seen in groups.seen),
                 120, "both groups committing together")
    survivor = groups.starts(0)[0]
    figures = {}

    # 1. One group's worker killed: its launcher starts it again in place.
    starts = len(groups.starts(1))
    (directory / "kill-group1").touch()
    killed_at = _when_gone(directory / "kill-group1")
    groups.poll()  # what was written before the loss is stamped before it
    figures["killed: survivor's next step"] = _survivor_goes_on(groups, killed_at, survivor)
    figures["killed: group back"] = _back(groups, 1, killed_at, starts)
    uncommitted = {"killed": _uncommitted(groups, 0, killed_at)}
    groups.until(lambda: len(groups.hashes(1, killed_at + figures["killed: group back"])) >= 3, 30, "group 1 going on")
    _same_weights(groups, killed_at + figures["killed: group back"])

    # 2. One group's node frozen: our liveness removes it, the scheduler starts it again.
    starts = len(groups.starts(1))
    groups.poll()
    frozen_at = time.monotonic()
    freeze(app_id, "replica_1", 0)
    figures["frozen: survivor's next step"] = _survivor_goes_on(groups, frozen_at, survivor)
    figures["frozen: group back"] = _back(groups, 1, frozen_at, starts)
    uncommitted["frozen"] = _uncommitted(groups, 0, frozen_at)
    groups.until(lambda: len(groups.hashes(1, frozen_at + figures["frozen: group back"])) >= 3, 30, "group 1 going on")
    _same_weights(groups, frozen_at + figures["frozen: group back"])

    # 3. The lighthouse lost: the scheduler starts it again, the groups carry on with it.
    groups.poll()
    lost_at = time.monotonic()
    kill(app_id, "lighthouse", 0)
    figures["lighthouse lost: both groups' next step"] = groups.until(
        lambda: all(any(step["participants"] == 2 for _, step in groups.after(group, lost_at + 0.5)) for group in (0, 1)),
        90, "both groups committing together after the lighthouse's loss") - lost_at
    assert groups.starts(0) == [survivor], f"group 0 restarted: starts {groups.starts(0)}"

    (directory / "stop").touch()
    assert wait(runner, handle, timeout_s=120) == AppState.SUCCEEDED, runner.status(handle)
    print({what: round(seconds, 2) for what, seconds in figures.items()}, "uncommitted", uncommitted)
    for what, bound in (("killed: survivor's next step", SURVIVOR_STALL_S), ("frozen: survivor's next step", FROZEN_STALL_S),
                        ("killed: group back", BACK_S), ("frozen: group back", FROZEN_BACK_S),
                        ("lighthouse lost: both groups' next step", LIGHTHOUSE_STALL_S)):
        record_restart(what, figures[what], bound)
    assert figures["killed: survivor's next step"] <= SURVIVOR_STALL_S, figures
    assert figures["frozen: survivor's next step"] <= FROZEN_STALL_S, figures
    assert figures["killed: group back"] <= BACK_S, figures
    assert figures["frozen: group back"] <= FROZEN_BACK_S, figures
    assert figures["lighthouse lost: both groups' next step"] <= LIGHTHOUSE_STALL_S, figures
    assert max(uncommitted.values()) <= UNCOMMITTED, uncommitted
    if keeps_logs:  # the lighthouse was started again (its log holds both starts)
        starts_of_lighthouse = [line for line in runner.log_lines(handle, "lighthouse", 0) if "for 2 replica groups" in line]
        assert len(starts_of_lighthouse) == 2, starts_of_lighthouse
    return handle, app_id


@needs_torchft
@pytest.mark.feature(TORCHFT)
@pytest.mark.parametrize("scheduler", [name for name in supporting(TORCHFT) if name not in NO_ROOM_FOR_A_LIGHTHOUSE],
                         indirect=True)
def test_a_lost_replica_group_costs_the_others_a_step_not_a_restart_and_comes_back_alone(
    runner: Runner, scheduler: SchedulerUnderTest, tmp_path: Path
) -> None:
    directory = tmp_path / "ft"
    directory.mkdir()
    args = dict(scheduler.component_args)
    args["mounts"] = [*args.get("mounts", []), *scheduler.shared_dir_mounts(directory)]
    # Three pods of a CPU each do not fit the test cluster's 2-CPU node: each asks for 0.6.
    fitted = {"reserved_millicpu": 400} if scheduler.name == "kubernetes" else {}
    assert scheduler.freeze_replica is not None
    _, app_id = losses_cost_a_step_and_the_group_comes_back(
        runner, scheduler.name, {**scheduler.cfg, **fitted}, args, directory, scheduler.kill_replica,
        scheduler.freeze_replica, keeps_logs=scheduler.keeps_lost_replicas_end)
    assert scheduler.leftovers(app_id) == []

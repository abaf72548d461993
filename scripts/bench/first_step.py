"""From ``torchx run`` to the first training step, and to the CLI's exit after SUCCEEDED, on every
scheduler: ours against torchx 0.7.0's own scheduler and dist.ddp (torchrun), alternating, in
the same run, each run on an idle machine or cluster.

The job is first_step_job.py (gloo, one all-reduce as its one step; rank 0 prints its times).
Each run is timed from the CLI's start; the CLI prints the job's handle when it has submitted it.
The phases, for both sides: submit (CLI start to the handle), start (to the launcher's start:
the scheduler's part), launcher (to the worker script's start: the launcher's import and
rendezvous), import (the script's ``import torch``), rendezvous (``init_process_group``), first
step, end (the script's end), exit (to the CLI's exit: the job's end as the scheduler sees it,
and the CLI's notice). "submit" and "start" overlap on local_cwd, whose replicas start before the
CLI prints the handle (start is then negative).

Schedulers and targets (ours/torchx, medians, at most):
  local_cwd     -j 1x2                         0.6
  local_cwd-warm  the same, ours forked by the warm interpreter (-cfg warm=true; started by the
                untimed first run)             0.25, to the CLI's exit 0.2
  local_docker  -j 2x2 through a workspace     warm 0.5, cold 0.9 (a new file in the workspace
                before each pair: each side builds its image)
  slurm         -j 1x2, --wait                 0.6; also each side's time outside the controller's
                wait for an allocation (slurmctld's log: submission to "sched: Allocate")
  slurm-allocation  the same, ours as the steps of an allocation held for the bench (salloc
                -N1 -c2 --exclusive; -cfg allocation), torchx's sbatch on the other node   (none)
  slurm-allocation-warm  the same, ours forked by the allocation's warm interpreter (-cfg
                warm=true; started by the untimed first run)   0.35
  kubernetes    -j 2x2 --cpu 1 on the test cluster (its pods on the Docker engine), ours only:
                absolute phases. torchx 0.7.0's kubernetes scheduler submits a Volcano job whose
                replicas find rank 0 through the svc plugin's VC_<task>_HOSTS variables, which the
                test cluster's Volcano stand-in does not set: its pods start and never meet.

torchx's side runs from .venv-baseline (torch, numpy and torchx at this checkout's pins, nothing
of ours; created on first use). Needs: slurm, ``SLURM_CONF`` naming a cluster that answers
(``bash scripts/slurm_cluster.sh start``); local_docker and kubernetes, a Docker engine
(``DOCKER_HOST``, else the private test engine's socket). Schedulers that cannot run here are
said and left out. Exits 0 whether or not a target is met; 1 when a run fails.

    .venv/bin/python scripts/bench/first_step.py [--schedulers local_cwd,local_cwd-warm,local_docker,slurm,
        slurm-allocation,slurm-allocation-warm,kubernetes]
        [--runs N] [--docker-modes warm,cold]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from baseline import BASELINE, OURS, ensure_baseline  # type: ignore[import-not-found]  # noqa: E402

JOB = HERE / "first_step_job.py"
PHASES = ("submit", "start", "launcher", "import", "rendezvous", "first step", "end", "exit")
HANDLE = re.compile(r"^(\w+)://[^/\s]*/(\S+)$", re.MULTILINE)
TIMES = re.compile(r"FIRST_STEP (\{.*\})")
SLURM_LOG_LINE = re.compile(r"^\[(\S+)\] (?:_slurm_rpc_submit_batch_job:|sched: Allocate|sched/backfill: \S+: Started) "
                            r"JobId=(\d+)")
IDLE_GAP_S = 2.0


@dataclass
class Run:
    total: float
    """CLI start to its exit."""
    to_first_step: float
    phases: dict[str, float]
    controller_wait: float | None = None
    """Slurm: the job's submission to its allocation, as slurmctld logged them."""


@dataclass
class Case:
    """One scheduler (one mode of it) as the bench runs it."""
    name: str
    target: float | None
    command: Callable[[Path], list[str]]
    """The ``torchx run`` arguments after the executable, given the side's environment."""
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    logs_in_output: bool = False
    """Whether the CLI prints the job's output (local_cwd); else ``torchx log`` is asked after."""
    before_each: Callable[[list[Run]], None] = lambda side_runs: None
    """Called before each run with that side's runs so far."""
    slurm_log: Path | None = None
    sides: tuple[Path, ...] = (OURS, BASELINE)
    exit_target: float | None = None
    """The target to the CLI's exit, where it is not ``target``."""


def timed_cli(venv: Path, case: Case) -> tuple[Run, str]:
    """One run of ``case`` with ``venv``'s torchx, and its handle."""
    command = [str(venv / "bin" / "torchx"), *case.command(venv)]
    env = {**os.environ, **case.env, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": str(venv), "LOGLEVEL": "WARNING"}
    env.pop("PYTHONPATH", None)
    lines: list[tuple[float, str]] = []
    started_at = time.time()
    process = subprocess.Popen(command, cwd=case.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)
    assert process.stdout is not None
    for line in process.stdout:
        lines.append((time.time(), line))
    code = process.wait()
    ended_at = time.time()
    output = "".join(line for _, line in lines)
    handle = HANDLE.search(output)
    if code != 0 or handle is None:  # both CLIs exit non-zero unless the job SUCCEEDED
        raise SystemExit(f"{' '.join(command)} failed (exit {code}, {venv.name}):\n{output[-4000:]}")
    submitted_at = next(at for at, line in lines if HANDLE.match(line.strip()))
    job_output = output if case.logs_in_output else _job_log(venv, handle.group(0), case, env)
    found = TIMES.search(job_output)
    if found is None:
        raise SystemExit(f"no FIRST_STEP line in the job's output ({venv.name}, {handle.group(0)}):\n"
                         f"{job_output[-3000:]}")
    times = json.loads(found.group(1))
    launcher = times["launcher"] or times["script"]
    marks = [started_at, submitted_at, launcher, times["script"], times["imported"], times["joined"],
             times["stepped"], times["ended"], ended_at]
    phases = {name: marks[index + 1] - marks[index] for index, name in enumerate(PHASES)}
    run = Run(ended_at - started_at, times["stepped"] - started_at, phases)
    if case.slurm_log is not None:
        run.controller_wait = _controller_wait(case.slurm_log, handle.group(2).split(":")[-1])
    return run, handle.group(0)


def _job_log(venv: Path, handle: str, case: Case, env: dict[str, str]) -> str:
    done = subprocess.run([str(venv / "bin" / "torchx"), "log", handle], cwd=case.cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    return done.stdout + done.stderr


def _controller_wait(log: Path, job_id: str) -> float | None:
    submitted = allocated = None
    deadline = time.monotonic() + 5  # the controller writes its log a moment after
    while time.monotonic() < deadline and (submitted is None or allocated is None):
        for line in log.read_text(errors="replace").splitlines()[-4000:]:
            found = SLURM_LOG_LINE.match(line)
            if found and found.group(2) == job_id:
                moment = _log_time(found.group(1))
                if "submit" in line:
                    submitted = moment
                elif allocated is None:
                    allocated = moment
        time.sleep(0.2)
    return allocated - submitted if submitted is not None and allocated is not None else None


def median(runs: list[Run], value: Callable[[Run], float | None]) -> float:
    values = [found for run in runs if (found := value(run)) is not None]
    return statistics.median(values) if values else float("nan")


def phase(name: str) -> Callable[[Run], float | None]:
    return lambda run: run.phases[name]


def report(case: Case, results: dict[Path, list[Run]]) -> None:
    ours = results[OURS]
    theirs = results.get(BASELINE, [])
    print(f"\n{case.name}: {len(ours)} runs each", flush=True)
    header = f"  {'':8} {'to step':>8} {'to exit':>8}  " + " ".join(f"{name:>10}" for name in PHASES)
    print(header)
    for label, runs in (("ours", ours), ("torchx", theirs)):
        if runs:
            print(f"  {label:8} {median(runs, lambda r: r.to_first_step):8.2f} {median(runs, lambda r: r.total):8.2f}  "
                  + " ".join(f"{median(runs, phase(name)):10.2f}" for name in PHASES), flush=True)
    if not theirs:
        return
    to_step = median(ours, lambda r: r.to_first_step) / median(theirs, lambda r: r.to_first_step)
    to_exit = median(ours, lambda r: r.total) / median(theirs, lambda r: r.total)
    exit_target = case.exit_target if case.exit_target is not None else case.target

    def verdict(ratio: float, target: float | None) -> str:
        return "" if target is None else f" ({'met' if ratio <= target else 'MISSED'})"

    target = "" if case.target is None else f"; target <= {case.target}" + (
        f" (to the exit <= {exit_target})" if exit_target != case.target else "")
    print(f"  ratio ours/torchx: to the first step {to_step:.2f}{verdict(to_step, case.target)}, to the CLI's exit "
          f"{to_exit:.2f}{verdict(to_exit, exit_target)}{target}")
    if case.slurm_log is not None:
        waits = {label: median(runs, lambda r: r.controller_wait) for label, runs in (("ours", ours), ("torchx", theirs))}
        own = {label: median(runs, lambda r: None if r.controller_wait is None else r.total - r.controller_wait)
               for label, runs in (("ours", ours), ("torchx", theirs))}
        print(f"  controller's wait for an allocation (median): ours {waits['ours']:.2f} s, torchx {waits['torchx']:.2f} s;"
              f" outside it, to the CLI's exit: ours {own['ours']:.2f} s, torchx {own['torchx']:.2f} s, ratio "
              f"{own['ours'] / own['torchx']:.2f}", flush=True)


def run_case(case: Case, runs: int) -> dict[Path, list[Run]]:
    results: dict[Path, list[Run]] = {side: [] for side in case.sides}
    print(f"{case.name}: one untimed run of each side", flush=True)
    untimed: dict[Path, list[Run]] = {}
    for side in case.sides:
        case.before_each([])
        untimed[side] = [timed_cli(side, case)[0]]
    for index in range(runs):
        order = case.sides if index % 2 == 0 else tuple(reversed(case.sides))
        shown = []
        for side in order:
            case.before_each(results[side] or untimed[side])
            run, _ = timed_cli(side, case)
            results[side].append(run)
            shown.append(f"{'ours' if side == OURS else 'torchx'} {run.to_first_step:.2f}/{run.total:.2f} s")
        print(f"  {index + 1}/{runs}: " + ", ".join(shown) + " (to the first step/to exit)", flush=True)
    return results


# --- the schedulers -----------------------------------------------------------------------------

def local_cwd_case(workdir: Path) -> Case:
    shutil.copy(JOB, workdir / JOB.name)
    from torchx_ext.schedulers.local.records import STATE_ROOT_ENV

    return Case("local_cwd -j 1x2", 0.6,
                lambda venv: ["run", "-s", "local_cwd", "dist.ddp", "-j", "1x2", "--script", JOB.name],
                workdir, env={STATE_ROOT_ENV: str(workdir / "state")}, logs_in_output=True)


def local_cwd_warm_case(workdir: Path) -> Case:
    """Ours forked by the warm interpreter (``-cfg warm=true``), which each run finds answering."""
    case = local_cwd_case(workdir)
    runtime = workdir / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**case.env, "XDG_RUNTIME_DIR": str(runtime)}  # a warm interpreter of the bench's own

    def command(venv: Path) -> list[str]:
        warm = ["-cfg", "warm=true"] if venv == OURS else []
        return ["run", "-s", "local_cwd", *warm, "dist.ddp", "-j", "1x2", "--script", JOB.name]

    def answering(side_runs: list[Run]) -> None:
        probe = [str(OURS / "bin" / "python"), "-c", "import sys; from torchx_ext.warm import client; "
                 "sys.exit(client.status() is None)"]
        deadline = time.monotonic() + 60
        while subprocess.run(probe, env={**os.environ, **env}).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)  # the untimed first run started it

    return Case("local_cwd -j 1x2, warm", 0.25, command, workdir, env=env, logs_in_output=True,
                before_each=answering, exit_target=0.2)


def stop_warm(workdir: Path) -> None:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(workdir / "runtime")}
    subprocess.run([str(OURS / "bin" / "python"), "-m", "torchx_ext.warm", "stop"], env=env, capture_output=True)


def slurm_case(workdir: Path) -> Case | None:
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        print("slurm: no cluster answers (SLURM_CONF): left out", flush=True)
        return None
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    found = re.search(r"^SlurmctldLogFile\s*=\s*(\S+)", config, re.MULTILINE)
    log = Path(found.group(1)) if found and Path(found.group(1)).exists() else None
    shutil.copy(JOB, workdir / JOB.name)

    def command(venv: Path) -> list[str]:
        cfg = ["-cfg", f"job_dir={workdir / 'jobs'}"] if venv == OURS else []
        return ["run", "-s", "slurm", *cfg, "--wait", "dist.ddp", "-j", "1x2", "--script", str(workdir / JOB.name)]

    interval = re.search(r"^SchedulerParameters\s*=.*\bsched_interval=(\d+)", config, re.MULTILINE)
    period_s = float(interval.group(1)) if interval else None

    def ready(side_runs: list[Run]) -> None:
        slurm_idle()
        if log is not None and period_s is not None and side_runs:
            submit_s = statistics.median(run.phases["submit"] for run in side_runs)
            before_controller_pass(log, period_s, submit_s)

    return Case("slurm -j 1x2", 0.6, command, workdir, before_each=ready, slurm_log=log)


def slurm_allocation_case(workdir: Path, stack: ExitStack, warm: bool = False) -> Case | None:
    """Ours in an allocation held for the bench (``-cfg allocation``: steps, no sbatch), against
    torchx's sbatch path on the cluster's other node, which is all it has; ``warm``: with
    ``-cfg warm=true``, whose interpreters the untimed first run starts and each run finds answering."""
    base = slurm_case(workdir)
    if base is None:
        return None
    allocation = held_allocation(stack)
    if allocation is None:
        return None

    def command(venv: Path) -> list[str]:
        if venv != OURS:
            return base.command(venv)
        return ["run", "-s", "slurm", "-cfg", f"job_dir={workdir / 'jobs'},allocation={allocation}"
                + (",warm=true" if warm else ""), "--wait", "dist.ddp", "-j", "1x2", "--script", str(workdir / JOB.name)]

    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    interval = re.search(r"^SchedulerParameters\s*=.*\bsched_interval=(\d+)", config, re.MULTILINE)

    def ready(side_runs: list[Run]) -> None:
        slurm_idle(allocation)
        if warm and side_runs:  # started by the untimed first run
            warm_answers(allocation)
        # torchx's batch job at its best: submitted just before the controller's pass.
        if base.slurm_log is not None and interval is not None and side_runs:
            submit_s = statistics.median(run.phases["submit"] for run in side_runs)
            before_controller_pass(base.slurm_log, float(interval.group(1)), submit_s)

    return Case(f"slurm -j 1x2 in allocation {allocation}{', warm' if warm else ''} (torchx: sbatch)",
                0.35 if warm else None, command, workdir, before_each=ready)


_HELD: list[str] = []


def held_allocation(stack: ExitStack) -> str | None:
    """The bench's allocation of one node, held until the bench ends; one for every case that runs
    in one (torchx's side needs the other node)."""
    if not _HELD:
        held = subprocess.run(["salloc", "--no-shell", "--nodes=1", "--exclusive", "--cpus-per-task=2",
                               "--job-name=bench-held"], capture_output=True, text=True, timeout=120)
        granted = re.search(r"Granted job allocation (\d+)", held.stderr)
        if granted is None:
            print(f"slurm in an allocation: salloc failed ({held.stderr.strip()[-300:]}): left out", flush=True)
            return None
        _HELD.append(granted.group(1))
        stack.callback(subprocess.run, ["scancel", _HELD[0]], capture_output=True)
    return _HELD[0]


def warm_answers(allocation: str, timeout_s: float = 60.0) -> None:
    """Waits until the allocation's warm interpreter answers (its node is on this host)."""
    from torchx_ext.warm.client import ask

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in Path(f"/tmp/torchx_ext-{os.getuid()}").glob(f"warm-slurm{allocation}-*.sock"):
            try:
                ask(path, {"op": "status"})
                return
            except (OSError, ValueError):
                pass
        time.sleep(0.2)


def before_controller_pass(log: Path, period_s: float, submit_s: float) -> None:
    """Waits so that the next submission (``submit_s`` after the CLI's start) lands
    ``CONTROLLER_LEAD_S`` before the controller's next scheduling pass. With a short
    ``sched_interval`` (2 s on the test cluster) the controller allocates batch jobs only on its
    pass, so a job waits anywhere from 0 to the whole interval: the same lead for both sides
    keeps that luck out of the ratio. The passes are found from the times of its last allocations."""
    passes = [_log_time(found.group(1)) for line in log.read_text(errors="replace").splitlines()[-2000:]
              if (found := re.match(r"^\[(\S+)\] sched: Allocate ", line))]
    if not passes:
        return
    now = time.time()
    last = passes[-1]
    next_pass = last + period_s * (int((now - last) / period_s) + 1)
    while next_pass - CONTROLLER_LEAD_S - submit_s < now + 0.05:
        next_pass += period_s
    time.sleep(next_pass - CONTROLLER_LEAD_S - submit_s - now)


CONTROLLER_LEAD_S = 0.3


def slurm_idle(held: str = "") -> None:
    """Waits until no job is queued or running and every node is idle (but allocation ``held``,
    and its node), then a little more."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True).stdout.split()
        busy = [state for state in states if state.rstrip("*") != "idle"]
        if queue == ([held] if held else []) and len(busy) == (1 if held else 0):
            break
        time.sleep(0.5)
    time.sleep(IDLE_GAP_S)


def _log_time(stamp: str) -> float:
    whole, _, fraction = stamp.partition(".")
    return time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{fraction or 0}")


@contextmanager
def docker_cases(workdir: Path, modes: list[str], stack: ExitStack) -> Iterator[list[Case]]:
    import docker_bench  # type: ignore[import-not-found]

    client = docker_bench.connect()
    if client is None:
        yield []
        return
    docker_bench.ensure_base_image(client)
    workspace = workdir / "workspace"
    workspace.mkdir()
    shutil.copy(JOB, workspace / JOB.name)
    before = docker_bench.engine_contents(client)

    def command(venv: Path) -> list[str]:
        return list(docker_bench.run_arguments(venv, workspace, JOB.name))

    def fresh(side_runs: list[Run]) -> None:
        (workspace / "fresh.txt").write_text(f"{uuid.uuid4().hex}\n")

    targets = {"warm": 0.5, "cold": 0.9}
    try:
        yield [Case(f"local_docker -j 2x2 {mode}", targets[mode], command, workspace,
                    before_each=fresh if mode == "cold" else (lambda side_runs: None)) for mode in modes]
    finally:
        docker_bench.clean_up(client, workspace, before)


@contextmanager
def kubernetes_case(workdir: Path) -> Iterator[Case | None]:
    from recovery import docker_client, test_cluster  # type: ignore[import-not-found]

    from tests.fixtures.docker_engine import ensure_test_image

    client = docker_client()
    if client is None:
        print("kubernetes: no Docker engine answers for the test cluster's pods: left out", flush=True)
        yield None
        return
    image = ensure_test_image(client)
    with test_cluster(client, image.paths):
        def command(venv: Path) -> list[str]:
            # One CPU per replica: the test cluster's node has two.
            return ["run", "-s", "kubernetes", "-cfg", "backend=job,cancel_grace=5", "--workspace", "", "--wait",
                    "dist.ddp", "-j", "2x2",
                    "--cpu", "1", "--image", image.name, "--script", str(JOB)]

        case = Case("kubernetes -j 2x2 (test cluster, backend job)", None, command, workdir, sides=(OURS,))
        try:
            yield case
        finally:
            subprocess.run([str(OURS / "bin" / "python"), "-c", _DELETE_ALL], env={**os.environ}, capture_output=True)
            client.close()


_DELETE_ALL = """
from torchx.schedulers import get_scheduler_factories
scheduler = get_scheduler_factories()["kubernetes"]("bench")
for app in scheduler.list():
    scheduler.delete(app.app_id)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedulers", default="local_cwd,local_cwd-warm,local_docker,slurm,slurm-allocation,"
                        "slurm-allocation-warm,kubernetes")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each side per scheduler (default 7)")
    parser.add_argument("--docker-modes", default="warm,cold")
    args = parser.parse_args()
    names = [name.strip() for name in args.schedulers.split(",") if name.strip()]
    known = ("local_cwd", "local_cwd-warm", "local_docker", "slurm", "slurm-allocation", "slurm-allocation-warm",
             "kubernetes")
    if unknown := [name for name in names if name not in known]:
        parser.error(f"unknown scheduler(s) {', '.join(unknown)}: expected some of {', '.join(known)}")
    modes = [mode.strip() for mode in args.docker_modes.split(",") if mode.strip()]
    if bad := [mode for mode in modes if mode not in ("warm", "cold")]:
        parser.error(f"unknown docker mode(s) {', '.join(bad)}: expected warm, cold")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    ensure_baseline()
    os.environ.pop("OMP_NUM_THREADS", None)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchx-ext-first-step-") as scratch, ExitStack() as stack:
        workdir = Path(scratch).resolve()
        os.chmod(workdir, 0o755)
        cases: list[Case] = []
        for name in names:
            place = workdir / name
            place.mkdir()
            if name == "local_cwd":
                cases.append(local_cwd_case(place))
            elif name == "local_cwd-warm":
                cases.append(local_cwd_warm_case(place))
                stack.callback(stop_warm, place)
            elif name == "slurm" and (case := slurm_case(place)) is not None:
                cases.append(case)
            elif name == "slurm-allocation" and (case := slurm_allocation_case(place, stack)) is not None:
                cases.append(case)
            elif name == "slurm-allocation-warm" and (case := slurm_allocation_case(place, stack, warm=True)) is not None:
                cases.append(case)
            elif name == "local_docker":
                cases.extend(stack.enter_context(docker_cases(place, modes, stack)))
            elif name == "kubernetes" and (case := stack.enter_context(kubernetes_case(place))) is not None:
                cases.append(case)
        for case in cases:
            report(case, run_case(case, args.runs))
    print(f"\ntotal {time.perf_counter() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

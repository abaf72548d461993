"""`torchx run -s local_docker --wait dist.ddp -j 2x2` through a workspace: ours against torchx 0.7.0's builtin.

Both sides run the trivial gloo all-reduce script (trivial_allreduce.py) from a workspace
directory, on the same Docker engine and the same base image, alternating ours (this
checkout's .venv: our dist.ddp and our local_docker, which caches workspace images by content
hash) with torchx 0.7.0's own component and scheduler (.venv-baseline, holding only torch,
numpy and torchx at the pins of requirements-test.txt; created on first use, as launch.py
does), which builds the workspace image on every run. Two modes:
  cold: the workspace has content neither side has seen (a new file is written into it before
        each pair of runs), so each side must build once;
  warm: the workspace is unchanged since that side's previous run.
Prints, per mode, the medians, the ratio ours/torchx and where each side's time goes (until
the job's first container started, the job in its containers, from its end until the CLI
returned). Targets on a 2-CPU machine: warm at most 0.5, cold at most 1.0. Exits 0 whether or
not a target is met; 1 if a run fails; 2 if no Docker engine answers.

The engine is DOCKER_HOST's, else the private test engine's socket
(/tmp/torchx-ext-docker/docker.sock, from `bash scripts/docker_engine.sh start`) when it
exists. No registry is needed: the base image (torchx-ext-bench:latest) is imported from an
almost empty root (usr, etc, tmp, ..., bin/lib/lib64 -> usr/...) when the engine lacks it, and
kept; /usr, the Python installation and this checkout (which holds both environments) are
bind-mounted read-only into the containers, with each side's environment first on PATH. The
jobs' containers, networks and volumes, and the workspace images the runs built, are removed
at the end; nothing else on the engine is touched.

    .venv/bin/python scripts/bench/docker_2x2.py [--runs N] [--modes cold,warm]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the offline image is the test suite's (tests/fixtures/docker_engine.py)
from tests.fixtures.docker_engine import root_filesystem  # noqa: E402


def _launch_bench() -> Any:
    # launch.py owns the baseline environment (.venv-baseline) and the job script.
    spec = importlib.util.spec_from_file_location("bench_launch", Path(__file__).with_name("launch.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_LAUNCH = _launch_bench()
OURS: Path = _LAUNCH.OURS
BASELINE: Path = _LAUNCH.BASELINE
JOB: Path = _LAUNCH.JOB
PRIVATE_SOCKET = Path("/tmp/torchx-ext-docker/docker.sock")
BASE_IMAGE = "torchx-ext-bench:latest"
TARGETS = {"cold": 1.0, "warm": 0.5}
# Each side's job labels: the app id on containers (and networks, volumes) per scheduler.
OUR_APP_LABEL = "torchx_ext.app_id"
OUR_WORKSPACE_LABEL = "torchx_ext.workspace"
THEIR_APP_LABEL = "torchx.pytorch.org/app-id"
THEIR_NETWORK = "torchx"
HANDLE = re.compile(r"^local_docker://[^/\s]*/(\S+)$", re.MULTILINE)


@dataclass
class Run:
    seconds: float
    to_start: float  # from the command until the job's first container started
    job: float  # first container started .. last container finished
    to_exit: float  # last container finished .. the command returned


@dataclass
class Side:
    name: str
    venv: Path
    app_label: str
    app_ids: list[str] = field(default_factory=list)
    runs: dict[str, list[Run]] = field(default_factory=dict)


def connect() -> Any:
    import docker

    if not os.environ.get("DOCKER_HOST") and PRIVATE_SOCKET.is_socket():
        os.environ["DOCKER_HOST"] = f"unix://{PRIVATE_SOCKET}"  # the runs' CLIs inherit it
    where = os.environ.get("DOCKER_HOST", "the default socket")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as error:  # the SDK raises its own, requests' and OS errors
        print(f"no Docker engine answers at {where} ({type(error).__name__}: {error}): run "
              "`bash scripts/docker_engine.sh start` (and export the DOCKER_HOST it prints if it is "
              f"not unix://{PRIVATE_SOCKET})", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"engine: {where} (Docker {client.version().get('Version', '?')})", flush=True)
    return client


def ensure_base_image(client: Any) -> None:
    """The base image: an almost empty root whose /usr (and Python) are bind-mounted at run time."""
    import docker.errors

    try:
        client.images.get(BASE_IMAGE)
        return
    except docker.errors.ImageNotFound:
        pass
    answer = str(client.api.import_image_from_data(root_filesystem()))
    found = re.search(r"sha256:[0-9a-f]{64}", answer)
    if found is None:
        raise SystemExit(f"importing the base image failed: {answer.strip()[-500:]}")
    repository, tag = BASE_IMAGE.split(":")
    client.images.get(found.group(0)).tag(repository, tag)  # tagged after import (Podman drops an import's tag)
    print(f"imported the base image {BASE_IMAGE} (kept afterwards)", flush=True)


def command(side: Side, workspace: Path) -> list[str]:
    mounts = [f"type=bind,src={path},dst={path},readonly"
              for path in ("/usr", str(Path(sys.base_prefix).resolve()), str(ROOT))]
    # torchx 0.7.0's CLI takes the workspace as file://DIR (its default is file://$CWD); ours
    # takes that too. The builders COPY the workspace to the image's / (its working dir), so
    # the script is found by its bare name.
    return [str(side.venv / "bin" / "torchx"), "run", "-s", "local_docker", "--workspace", f"file://{workspace}",
            "--wait", "dist.ddp", "-j", "2x2", "--image", BASE_IMAGE, "--mounts", ",".join(mounts),
            "--env", f"PATH={side.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin,LOGLEVEL=WARNING",
            "--script", JOB.name]


def _engine_time(stamp: str) -> float:
    # The engine's RFC 3339 times carry nanoseconds; datetime takes microseconds.
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    moment = datetime.fromisoformat(f"{whole}.{(fraction or '0')[:6]:0<6}").replace(tzinfo=timezone.utc)
    return moment.timestamp()


def timed_run(client: Any, side: Side, workspace: Path) -> Run:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wall = time.time()
    start = time.perf_counter()
    result = subprocess.run(command(side, workspace), cwd=workspace, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    handle = HANDLE.search(result.stdout)
    if handle is not None:
        side.app_ids.append(handle.group(1))
    if result.returncode != 0 or "SUCCEEDED" not in result.stdout + result.stderr or handle is None:
        raise SystemExit(f"{side.name} failed (exit {result.returncode}):\n{' '.join(command(side, workspace))}\n"
                         f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    containers = client.containers.list(all=True, filters={"label": f"{side.app_label}={handle.group(1)}"})
    states = [container.attrs["State"] for container in containers]
    if len(states) != 2:
        raise SystemExit(f"{side.name}: expected the job's 2 containers, found {len(states)}")
    first_start = min(_engine_time(state["StartedAt"]) for state in states)
    last_end = max(_engine_time(state["FinishedAt"]) for state in states)
    return Run(seconds, first_start - wall, last_end - first_start, wall + seconds - last_end)


def clean_up(client: Any, sides: list[Side], workspace: Path, images_before: set[str],
             networks_before: set[str]) -> None:
    import docker.errors

    images: set[str] = set()
    for side in sides:
        for app_id in side.app_ids:
            selector = {"label": f"{side.app_label}={app_id}"}
            for container in client.containers.list(all=True, filters=selector):
                images.add(container.attrs.get("Image", ""))
                container.remove(force=True, v=True)
            for network in client.networks.list(filters=selector):
                network.remove()
            for volume in client.volumes.list(filters=selector):
                volume.remove(force=True)
    # Ours tags its images and labels them with the workspace (a directory only this run used);
    # torchx's builtin leaves them untagged: they are the images its jobs' containers ran.
    images.update(image.id for image in client.images.list(filters={"label": f"{OUR_WORKSPACE_LABEL}={workspace}"}))
    for image_id in sorted(images - images_before - {""}):
        try:
            client.images.remove(image_id, force=True)  # its untagged parents (the build's steps) go with it
        except docker.errors.NotFound:
            pass
    if THEIR_NETWORK not in networks_before:
        for network in client.networks.list(names=[THEIR_NETWORK]):
            if network.name == THEIR_NETWORK and not network.attrs.get("Containers"):
                network.remove()


def report(mode: str, ours: list[Run], theirs: list[Run]) -> None:
    def median(runs: list[Run], phase: str) -> float:
        return statistics.median(float(getattr(run, phase)) for run in runs)

    ratio = median(ours, "seconds") / median(theirs, "seconds")
    target = TARGETS[mode]
    print(f"{mode}: ours median {median(ours, 'seconds'):.2f} s, "
          f"torchx 0.7.0 median {median(theirs, 'seconds'):.2f} s, "
          f"ratio {ratio:.2f}  target <= {target}: {'PASS' if ratio <= target else 'FAIL'}  ({len(ours)} runs each)",
          flush=True)
    for name, runs in (("ours", ours), ("torchx", theirs)):
        print(f"  {name:>6} medians: to first container start {median(runs, 'to_start'):.2f} s, job "
              f"{median(runs, 'job'):.2f} s, end to exit {median(runs, 'to_exit'):.2f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each side per mode (default 3)")
    parser.add_argument("--modes", default="cold,warm", help="comma-separated: cold, warm (default cold,warm)")
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if unknown := [mode for mode in modes if mode not in TARGETS]:
        parser.error(f"unknown mode(s) {', '.join(unknown)}: expected cold, warm")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    _LAUNCH.ensure_baseline()
    client = connect()
    ensure_base_image(client)
    images_before = {image.id for image in client.images.list(all=True)}
    networks_before = {network.name for network in client.networks.list()}
    ours = Side("ours", OURS, OUR_APP_LABEL)
    theirs = Side("torchx 0.7.0", BASELINE, THEIR_APP_LABEL)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchx-ext-docker-bench-") as scratch:
        workspace = Path(scratch).resolve()
        shutil.copy(JOB, workspace / JOB.name)
        try:
            print("first run of each side (checks both succeed; not timed)", flush=True)
            for side in (ours, theirs):
                run = timed_run(client, side, workspace)
                print(f"  {side.name}: {run.seconds:.2f} s", flush=True)
            for mode in modes:
                for run_index in range(args.runs):
                    if mode == "cold":
                        (workspace / "fresh.txt").write_text(f"{uuid.uuid4().hex}\n")
                    pair = (ours, theirs) if run_index % 2 == 0 else (theirs, ours)
                    for side in pair:
                        side.runs.setdefault(mode, []).append(timed_run(client, side, workspace))
                    print(f"  {mode} {run_index + 1}/{args.runs}: ours {ours.runs[mode][-1].seconds:.2f} s, "
                          f"torchx {theirs.runs[mode][-1].seconds:.2f} s", flush=True)
            for mode in modes:
                report(mode, ours.runs[mode], theirs.runs[mode])
        finally:
            clean_up(client, [ours, theirs], workspace, images_before, networks_before)
    print(f"total {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()

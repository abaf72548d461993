"""`torchx run -s local_docker dist.ddp -j 2x2` through a workspace: ours against torchx 0.7.0's builtin.

Both sides run the same trivial gloo all-reduce script (trivial_allreduce.py) from a workspace
directory on the same engine and the same base image, with `--wait`, alternating ours (this
checkout's .venv: our dist.ddp and our local_docker, which caches workspace images by content)
with torchx 0.7.0's own component and scheduler (.venv-baseline, made by launch.py on first
use), in two modes:
  cold: the workspace has content neither side has seen (a new file before each pair of runs),
        so both must build;
  warm: the workspace is unchanged since that side's previous run.
Prints the medians and the ratio ours/torchx per mode. Targets: warm at most 0.5, cold at most 1.0.

The engine is DOCKER_HOST's, else the test engine's private socket (`bash scripts/docker_engine.sh
start`). No registry is needed: the base image is imported from an almost empty root, and /usr,
the Python installation and this checkout (with both environments) are bind-mounted read-only.
Leaves the engine as it found it (removes the runs' containers, networks and images).

    .venv/bin/python scripts/bench/docker_2x2.py [--runs N] [--modes cold,warm]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any



def _launch_bench() -> Any:
    # launch.py owns the baseline environment (.venv-baseline) and the job script.
    spec = importlib.util.spec_from_file_location("bench_launch", Path(__file__).with_name("launch.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_LAUNCH = _launch_bench()
BASELINE: Path = _LAUNCH.BASELINE
JOB: Path = _LAUNCH.JOB
OURS: Path = _LAUNCH.OURS
ROOT: Path = _LAUNCH.ROOT

PRIVATE_SOCKET = "unix:///tmp/torchx-ext-docker/docker.sock"
BASE_IMAGE = "torchx-ext-bench:latest"
TARGETS = {"warm": 0.5, "cold": 1.0}


def connect() -> Any:
    import docker

    os.environ.setdefault("DOCKER_HOST", PRIVATE_SOCKET)
    try:
        client = docker.from_env()
        client.ping()
    except Exception as error:  # the SDK raises its own, requests' and OS errors
        raise SystemExit(f"no Docker engine answers at {os.environ['DOCKER_HOST']} ({type(error).__name__}): "
                         "run `bash scripts/docker_engine.sh start` and export the DOCKER_HOST it prints") from None
    return client


def base_image(client: Any) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, mode in (("usr", 0o755), ("etc", 0o755), ("proc", 0o555), ("sys", 0o555), ("dev", 0o755),
                           ("root", 0o700), ("sbin", 0o755), ("tmp", 0o1777)):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            archive.addfile(info)
        for link in ("bin", "lib", "lib64"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            archive.addfile(info)
    answer = client.api.import_image_from_data(buffer.getvalue())
    image_id = answer.strip().splitlines()[-1].split('"status":"', 1)[1].split('"', 1)[0]
    client.images.get(image_id).tag(*BASE_IMAGE.split(":"))


def command(venv: Path, workspace: Path) -> list[str]:
    mounts = []
    for path in ("/usr", str(Path(sys.base_prefix).resolve()), str(ROOT)):
        mounts += [f"type=bind,src={path},dst={path},readonly"]
    # torchx 0.7.0's CLI takes file://DIR (its default form); ours takes that too.
    return [str(venv / "bin" / "torchx"), "run", "-s", "local_docker", "--workspace", f"file://{workspace}", "--wait",
            "dist.ddp", "-j", "2x2", "--image", BASE_IMAGE, "--mounts", ",".join(mounts),
            "--env", f"PATH={venv}/bin:/usr/local/bin:/usr/bin:/bin,LOGLEVEL=WARNING", "--script", JOB.name]


def timed_run(venv: Path, workspace: Path) -> float:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    start = time.perf_counter()
    result = subprocess.run(command(venv, workspace), cwd=workspace, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0 or "SUCCEEDED" not in result.stdout + result.stderr:
        raise SystemExit(f"{venv.name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return elapsed


def clean_up(client: Any, before: dict[str, set[str]]) -> None:
    for container in client.containers.list(all=True):
        if container.id not in before["containers"]:
            container.remove(force=True, v=True)
    for volume in client.volumes.list():
        if volume.id not in before["volumes"]:
            volume.remove(force=True)
    for network in client.networks.list():
        if network.id not in before["networks"]:
            network.remove()
    for image in client.images.list(all=True):
        if image.id not in before["images"]:
            try:
                client.images.remove(image.id, force=True)
            except Exception:  # a parent removed with its child already
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each side per mode (default 3)")
    parser.add_argument("--modes", default="cold,warm", help="comma-separated: cold, warm (default both)")
    args = parser.parse_args()
    _LAUNCH.ensure_baseline()
    client = connect()
    before = {
        "containers": {container.id for container in client.containers.list(all=True)},
        "volumes": {volume.id for volume in client.volumes.list()},
        "networks": {network.id for network in client.networks.list()},
        "images": {image.id for image in client.images.list(all=True)},
    }
    base_image(client)
    try:
        with tempfile.TemporaryDirectory(prefix="torchx-ext-docker-bench-") as scratch:
            workspace = Path(scratch)
            shutil.copy(JOB, workspace / JOB.name)
            print("first run of each side (checks both work; not timed)", flush=True)
            timed_run(OURS, workspace)
            timed_run(BASELINE, workspace)
            for mode in args.modes.split(","):
                if mode not in TARGETS:
                    raise SystemExit(f"unknown mode {mode!r}: expected cold or warm")
                ours: list[float] = []
                theirs: list[float] = []
                for run in range(args.runs):
                    if mode == "cold":
                        (workspace / "fresh.txt").write_text(uuid.uuid4().hex)
                    first, second = (OURS, BASELINE) if run % 2 == 0 else (BASELINE, OURS)
                    for venv in (first, second):
                        elapsed = timed_run(venv, workspace)
                        (ours if venv == OURS else theirs).append(elapsed)
                    print(f"  {mode} run {run + 1}: ours {ours[-1]:.2f} s, torchx {theirs[-1]:.2f} s", flush=True)
                ratio = statistics.median(ours) / statistics.median(theirs)
                target = TARGETS[mode]
                print(f"{mode}: ours median {statistics.median(ours):.2f} s, torchx 0.7.0 median "
                      f"{statistics.median(theirs):.2f} s, ratio {ratio:.2f}  target <= {target}: "
                      f"{'met' if ratio <= target else 'NOT met'}  ({args.runs} runs each)", flush=True)
    finally:
        clean_up(client, before)


if __name__ == "__main__":
    main()

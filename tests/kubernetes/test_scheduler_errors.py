"""What a user sees from `torchx ... -s kubernetes` when there is no cluster to talk to."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import free_port, torchx as run_torchx

TORCHX = str(Path(sys.executable).with_name("torchx"))


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {"token": "test"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": "team-a"}}],
    }))
    return path


def torchx(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # The installed command, as a user runs it. Warnings of the libraries (urllib3, the client)
    # are not what a user's error looks like.
    return run_torchx(*args, env={"PYTHONWARNINGS": "ignore", **env}, cwd=cwd, command=[TORCHX])


def test_an_unreachable_api_server_is_one_line_naming_it(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{free_port()}"
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "config", server))}

    run = torchx("run", "-s", "kubernetes", "--workspace", "", "dist.ddp", "-j", "1x1", "--image", "img:1", "--script", "train.py",
                 env=env, cwd=tmp_path)
    status = torchx("status", "kubernetes://torchx/team-a:train-abc12345", env=env, cwd=tmp_path)

    for result in (run, status):
        assert result.returncode != 0
        assert "Traceback" not in result.stderr, result.stderr
        errors = [line for line in result.stderr.splitlines() if not line.startswith("torchx 20")]  # log lines
        assert len(errors) == 1, result.stderr
        assert errors[0].startswith(f"torchx: error: cannot reach the Kubernetes API server at {server}"), errors
        assert errors[0].endswith("check the kubeconfig's server and that the cluster is up"), errors


def test_no_kubeconfig_says_how_to_give_one(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}

    result = torchx("status", "kubernetes://torchx/default:train-abc12345", env=env, cwd=tmp_path)

    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert "torchx: error: no Kubernetes configuration" in result.stderr and "KUBECONFIG" in result.stderr


def test_the_dry_run_needs_no_cluster_and_takes_the_contexts_namespace(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "config", f"http://127.0.0.1:{free_port()}"))}

    result = torchx("run", "-s", "kubernetes", "--dryrun", "--workspace", "", "dist.ddp", "-j", "2x1", "--image", "img:1",
                    "--script", "train.py", env=env, cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert "kind: Job" in result.stdout and "namespace: team-a" in result.stdout


@pytest.mark.parametrize(("backend", "kind"), [("jobset", "kind: JobSet"), ("volcano", "apiVersion: batch.volcano.sh/v1alpha1")])
def test_the_dry_run_of_each_backend_needs_no_cluster(tmp_path: Path, backend: str, kind: str) -> None:
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "config", f"http://127.0.0.1:{free_port()}"))}

    result = torchx("run", "-s", "kubernetes", "-cfg", f"backend={backend}", "--dryrun", "--workspace", "", "dist.ddp",
                    "-j", "2x1",
                    "--image", "img:1", "--script", "train.py", env=env, cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert kind in result.stdout and "namespace: team-a" in result.stdout


def test_a_malformed_app_id_is_one_line_naming_the_forms(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "config", f"http://127.0.0.1:{free_port()}"))}

    result = torchx("status", "kubernetes://torchx/team-a:kubeflow:train-abc12345", env=env, cwd=tmp_path)

    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert "invalid kubernetes app id 'team-a:kubeflow:train-abc12345': expected NAMESPACE:NAME, " \
           "NAMESPACE:jobset:NAME or NAMESPACE:volcano:NAME" in result.stderr


def test_unknown_runopts_are_refused_listing_the_valid_ones(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "config", f"http://127.0.0.1:{free_port()}"))}

    result = torchx("run", "-s", "kubernetes", "-cfg", "namespce=x", "--dryrun", "dist.ddp", "-j", "1x1",
                    "--image", "img:1", "--script", "train.py", env=env, cwd=tmp_path)

    assert result.returncode != 0
    assert "namespce" in result.stderr and "numa_aligned" in result.stderr, result.stderr


@pytest.mark.parametrize(("cfg", "component", "expected"), [
    ("", ["--image", ""], "role 'train' has no image: give one with --image"),
    ("namespace=Team_A", [], "invalid namespace 'Team_A': expected a DNS label"),
    ("tolerations=gpu:Sometimes", [], "invalid toleration 'gpu:Sometimes': expected KEY=VALUE:EFFECT"),
    ("shm_size=lots", [], "invalid shm_size 'lots': expected 'auto', or a size such as 512Mi"),
    ("image_pull_policy=Sometimes", [], "invalid image_pull_policy 'Sometimes': expected one of Always"),
    ("backend=kubeflow", [], "invalid backend 'kubeflow': expected one of job, jobset, volcano"),
    ("", ["--mounts", "type=device,src=/dev/infiniband/uverbs0"],
     "role 'train': device mount /dev/infiniband/uverbs0 would need a privileged host-path mount"),
])
def test_bad_input_is_one_line_naming_the_value_before_anything_is_sent(
    tmp_path: Path, cfg: str, component: list[str], expected: str
) -> None:
    # The server is unreachable: nothing may be sent before the input is checked.
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "config", f"http://127.0.0.1:{free_port()}"))}
    image = [] if "--image" in component else ["--image", "img:1"]

    # A workspace's own checks (image_repo, an engine) are tests/kubernetes/test_workspaces.py's.
    result = torchx("run", "-s", "kubernetes", *(["-cfg", cfg] if cfg else []), "--workspace", "", "dist.ddp",
                    "-j", "1x1", *image,
                    *component, "--script", "train.py", env=env, cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("torchx 20")]
    assert len(errors) == 1 and errors[0].startswith(f"torchx: error: {expected}"), result.stderr

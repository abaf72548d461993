"""The pure AppDef -> manifests step of the kubernetes scheduler.

Golden files hold the whole dry-run YAML; after a deliberate change regenerate them with
``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_kubernetes_manifests.py`` and
read the diff. Every manifest is validated strictly against the Kubernetes API schema of two
minor versions (kubernetes-validate), then against what that schema cannot say.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from torchx import specs

from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.app_ids import KUBERNETES, new_app_id
from torchx_ext.schedulers.kubernetes.manifests import AppManifests, KubernetesOptions, build_manifests

GOLDEN = Path(__file__).parent / "golden" / "kubernetes"
SCHEMA_VERSIONS = ("1.34", "1.35")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def check(manifests: AppManifests) -> list[dict[str, Any]]:
    """Validates every object (API schema, then our own rules); returns them."""
    objects = list(yaml.safe_load_all(manifests.to_yaml()))
    for obj in objects:
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        assert DNS_LABEL.fullmatch(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63
        for key, value in obj["metadata"].get("labels", {}).items():
            assert len(value) <= 63 and re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", value), (key, value)
    service, *jobs = objects
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    for job in jobs:
        spec = job["spec"]
        pod = spec["template"]["spec"]
        # Indexed mode: one pod per replica id, hostnames {job}-{index} under the Service.
        assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
        assert pod["restartPolicy"] == "Never" and pod["subdomain"] == service["metadata"]["name"]
        assert spec["podReplacementPolicy"] == "Failed"
        last_hostname = f"{job['metadata']['name']}-{spec['completions'] - 1}"
        assert DNS_LABEL.fullmatch(last_hostname) and len(last_hostname) <= 63
        assert spec["template"]["metadata"]["labels"] == {
            key: value for key, value in job["metadata"]["labels"].items() if not key.startswith("kueue")}
        for container in pod["containers"]:
            resources = container["resources"]
            for name, value in resources.get("requests", {}).items():
                if "/" in name:  # extended resources (GPUs, EFA) must be requested as limited
                    assert resources["limits"][name] == value
    return objects


def golden(name: str, manifests: AppManifests) -> None:
    path = GOLDEN / f"{name}.yaml"
    text = manifests.to_yaml()
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs: regenerate with UPDATE_GOLDEN=1 and read the diff"


def test_a_2x2_cpu_job_is_a_headless_service_and_one_indexed_job() -> None:
    app = ddp("--lr", "0.1", script="train.py", j="2x2", image="registry.example/train:1")
    manifests = build_manifests(app, app_id="train-abc12345", options=KubernetesOptions(namespace="team-a"))

    service, job = check(manifests)
    golden("ddp_2x2", manifests)
    env = {item["name"]: item["value"] for item in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TORCHX_RANK0_HOST"] == "train-abc12345-train-0.train-abc12345"
    assert env["TORCHELASTIC_ERROR_FILE"] == "/dev/termination-log"
    # Not NUMA-aligned without a named resource: Burstable, with a memory limit.
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert "cpu" not in resources["limits"]
    # max_retries 0: the first failed pod fails the job.
    assert job["spec"]["backoffLimitPerIndex"] == 0 and job["spec"]["maxFailedIndexes"] == 0
    assert {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}} in (
        job["spec"]["podFailurePolicy"]["rules"])
    assert "successPolicy" not in job["spec"]


def test_a_p5_named_resource_gives_guaranteed_numa_aligned_pods_with_gpus_and_efa() -> None:
    app = ddp(script="train.py", j="4x8", h="aws_p5.48xlarge", image="registry.example/train:1", max_retries=2)
    options = KubernetesOptions(namespace="ml", queue="gpu-queue", service_account="trainer",
                                priority_class="high", node_selector={"pool": "p5"},
                                tolerations=("nvidia.com/gpu:NoSchedule", "dedicated=ml:NoExecute"),
                                image_pull_secrets=("regcred",), image_pull_policy="IfNotPresent", shm_size="64Gi")
    manifests = build_manifests(app, app_id="train-abc12345", options=options)

    _, job = check(manifests)
    golden("ddp_4x8_p5_queued", manifests)
    pod = job["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS
    assert re.fullmatch(r"\d+", resources["limits"]["cpu"])  # integer CPUs: exclusive under the static policy
    assert resources["limits"]["nvidia.com/gpu"] == "8" and resources["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert pod["nodeSelector"] == {"pool": "p5", "node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert not any("hostPath" in volume for volume in pod["volumes"])
    assert "privileged" not in yaml.safe_dump(pod)
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert job["spec"]["backoffLimitPerIndex"] == 2


def test_an_elastic_job_runs_max_pods_tolerates_max_minus_min_failures_and_index_0_decides() -> None:
    app = ddp(script="train.py", j="2:4x1", image="img:1", max_retries=1)
    manifests = build_manifests(app, app_id="elastic-abc12345", options=KubernetesOptions())

    _, job = check(manifests)
    golden("ddp_elastic_2_4", manifests)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["maxFailedIndexes"] == 2
    assert job["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert not any(rule["action"] == "FailJob" for rule in job["spec"]["podFailurePolicy"]["rules"])


def test_numa_alignment_follows_the_runopt_over_the_named_resource() -> None:
    app = ddp(script="train.py", j="1x1", cpu=3, memMB=2048, image="img:1")
    aligned = check(build_manifests(app, app_id="a-abc12345", options=KubernetesOptions(numa_aligned=True)))[1]
    resources = aligned["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "2", "memory": "2048Mi"}

    named = ddp(script="train.py", j="1x8", h="dgx_h100", image="img:1")
    off = check(build_manifests(named, app_id="a-abc12345", options=KubernetesOptions(numa_aligned=False)))[1]
    assert "cpu" not in off["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]


def test_arguments_and_env_values_survive_the_kubelets_dollar_expansion() -> None:
    value = "$HOME $(HOME) $$(HOME) ${x} 'q' \"d\"\nnext"
    app = ddp(value, script="echo.py", j="1x1", image="img:1", env={"V": value})
    job = check(build_manifests(app, app_id="a-abc12345", options=KubernetesOptions()))[1]
    container = job["spec"]["template"]["spec"]["containers"][0]

    assert kubelet_expand(container["args"][-1]) == value
    assert kubelet_expand(next(item["value"] for item in container["env"] if item["name"] == "V")) == value


def test_the_static_rendezvous_node_rank_is_the_pods_completion_index() -> None:
    app = ddp(script="train.py", j="2x1", image="img:1", rdzv_backend="static")
    job = check(build_manifests(app, app_id="a-abc12345", options=KubernetesOptions()))[1]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]

    assert args[args.index("--node-rank") + 1] == "$(JOB_COMPLETION_INDEX)"


def kubelet_expand(text: str, env: dict[str, str] | None = None) -> str:
    """Kubernetes' $(VAR) expansion: $$ -> $, $(KNOWN) -> its value, anything else as is."""
    env = {"HOME": "/root"} if env is None else env
    out, position = [], 0
    while position < len(text):
        if text[position] == "$" and position + 1 < len(text):
            following = text[position + 1]
            if following == "$":
                out.append("$")
                position += 2
                continue
            if following == "(" and (close := text.find(")", position)) != -1 and text[position + 2:close] in env:
                out.append(env[text[position + 2:close]])
                position = close + 1
                continue
        out.append(text[position])
        position += 1
    return "".join(out)


@settings(max_examples=60, deadline=None)
@given(app_name=st.text(max_size=120), role_name=st.text(min_size=1, max_size=120),
       replicas=st.integers(min_value=1, max_value=20000))
def test_any_names_give_valid_dns_names_within_63_characters(app_name: str, role_name: str, replicas: int) -> None:
    app = specs.AppDef(app_name, roles=[specs.Role(role_name, image="img:1", entrypoint="python",
                                                    num_replicas=replicas)])
    app_id = new_app_id(app_name, KUBERNETES)
    manifests = build_manifests(app, app_id=app_id, options=KubernetesOptions())
    job = manifests.jobs[0]
    last = f"{job['metadata']['name']}-{replicas - 1}"
    assert DNS_LABEL.fullmatch(last) and len(last) <= 63
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", manifests.service["metadata"]["name"])
    assert job["metadata"]["annotations"]["torchx-ext/app-name"] == app_name  # readable as given


def test_distinct_apps_never_collide() -> None:
    ids = {new_app_id("train", KUBERNETES) for _ in range(2000)}
    assert len(ids) == 2000


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"image": ""}, "has no image: give one with --image"),
        ({"mounts": ["type=device", "src=/dev/infiniband/uverbs0"]}, "extended resource"),
        ({"env": {"A=B": "1"}}, "invalid environment variable name 'A=B'"),
    ],
)
def test_bad_roles_are_refused_naming_the_value(change: dict[str, Any], expected: str) -> None:
    arguments: dict[str, Any] = {"script": "train.py", "j": "1x1", "image": "img:1", **change}
    with pytest.raises(InvalidArgumentError, match=re.escape(expected)):
        build_manifests(ddp(**arguments), app_id="a-abc12345", options=KubernetesOptions())


def test_numa_alignment_without_cpu_or_memory_to_request_is_refused() -> None:
    role = specs.Role("trainer", image="img:1", entrypoint="python", resource=specs.Resource(cpu=0, gpu=0, memMB=0))
    with pytest.raises(InvalidArgumentError, match="NUMA-aligned pods need a cpu and memMB"):
        build_manifests(specs.AppDef("a", roles=[role]), app_id="a-abc12345",
                        options=KubernetesOptions(numa_aligned=True))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (KubernetesOptions(tolerations=("gpu:Sometimes",)), "invalid toleration 'gpu:Sometimes'"),
        (KubernetesOptions(tolerations=("justakey",)), "expected KEY=VALUE:EFFECT"),
        (KubernetesOptions(shm_size="lots"), "invalid shm_size 'lots'"),
        (KubernetesOptions(shm_size="8Gi"), "more than the role's memory limit"),
        (KubernetesOptions(image_pull_policy="Sometimes"), "expected one of Always, IfNotPresent, Never"),
        (KubernetesOptions(namespace="Team_A"), "invalid namespace 'Team_A'"),
    ],
)
def test_bad_options_are_refused_naming_the_value(options: KubernetesOptions, expected: str) -> None:
    app = ddp(script="train.py", j="1x1", image="img:1", memMB=1024)
    with pytest.raises(InvalidArgumentError, match=re.escape(expected)):
        build_manifests(app, app_id="a-abc12345", options=options)


def test_roles_that_become_the_same_job_name_are_refused() -> None:
    roles = [specs.Role(name, image="img:1", entrypoint="python") for name in ("Trainer", "trainer!")]
    with pytest.raises(InvalidArgumentError, match="both become Job name 'a-abc12345-trainer'"):
        build_manifests(specs.AppDef("a", roles=roles), app_id="a-abc12345", options=KubernetesOptions())

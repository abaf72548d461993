"""The pure AppDef -> manifests step of the kubernetes scheduler.

Golden files hold the whole dry-run YAML; after a deliberate change regenerate them with
``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_kubernetes_request.py`` and
read the diff. Every manifest is validated strictly against the Kubernetes API schema of two
minor versions (kubernetes-validate), then against what that schema cannot say.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from torchx_ext.exit_codes import STUCK
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from torchx import specs

from tests.fixtures.crd_schemas import crd_json_schema
from torchx_ext.components.dist import ddp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.app_ids import DNS_LABEL_IDS, new_app_id
from torchx_ext.schedulers.kubernetes.request import KubernetesJobRequest, build_request
from torchx_ext.schedulers.kubernetes.options import BACKEND_NAMES, ManifestOptions

GOLDEN = Path(__file__).parent / "golden" / "kubernetes"
SCHEMA_VERSIONS = ("1.34", "1.35")
CORE_API_VERSIONS = ("v1", "batch/v1", "networking.k8s.io/v1")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def check(manifests: KubernetesJobRequest) -> list[dict[str, Any]]:
    """Validates every object (API schema, then our own rules); returns them."""
    objects = list(yaml.safe_load_all(manifests.to_yaml()))
    for obj in objects:
        for core in [obj] if obj["apiVersion"] in CORE_API_VERSIONS else embedded_core_objects(obj):
            for version in SCHEMA_VERSIONS:
                kubernetes_validate.validate(core, version, strict=True)
        if obj["apiVersion"] not in CORE_API_VERSIONS:
            jsonschema.validate(obj, crd_json_schema(obj["kind"], closed=True))  # unknown fields refused
        assert DNS_LABEL.fullmatch(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63
        for key, value in obj["metadata"].get("labels", {}).items():
            assert len(value) <= 63 and re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", value), (key, value)
    if manifests.backend != "job":
        return objects
    service, *jobs = [obj for obj in objects if obj["kind"] != "NetworkPolicy"]
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


def embedded_core_objects(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The Jobs a JobSet's templates make, the pods a Volcano Job's tasks make: checked against the
    core schema too (stricter than the CRDs' copies of it)."""
    if obj["kind"] == "JobSet":
        return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": replicated["name"], **replicated["template"]["metadata"]},
                 "spec": replicated["template"]["spec"]} for replicated in obj["spec"]["replicatedJobs"]]
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": task["name"], **task["template"]["metadata"]},
             "spec": task["template"]["spec"]} for task in obj["spec"]["tasks"]]


def golden(name: str, manifests: KubernetesJobRequest) -> None:
    path = GOLDEN / f"{name}.yaml"
    # The torchx line's version is a label value: the same file holds for either line.
    text = re.sub(r"(torchx\.pytorch\.org/version: ).*", r"\1TORCHX_VERSION", manifests.to_yaml())
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs: regenerate with UPDATE_GOLDEN=1 and read the diff"


def test_a_2x2_cpu_job_is_a_headless_service_and_one_indexed_job() -> None:
    app = ddp("--lr", "0.1", script="train.py", j="2x2", image="registry.example/train:1")
    manifests = build_request(app, app_id="train-abc12345", options=ManifestOptions(namespace="team-a"))

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
    options = ManifestOptions(namespace="ml", queue="gpu-queue", service_account="trainer",
                                priority_class="high", node_selector={"pool": "p5"},
                                tolerations=("nvidia.com/gpu:NoSchedule", "dedicated=ml:NoExecute"),
                                image_pull_secrets=("regcred",), image_pull_policy="IfNotPresent", shm_size="64Gi")
    manifests = build_request(app, app_id="train-abc12345", options=options)

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
    manifests = build_request(app, app_id="elastic-abc12345", options=ManifestOptions())

    _, job = check(manifests)
    golden("ddp_elastic_2_4", manifests)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["maxFailedIndexes"] == 2
    assert job["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    # A failed pod never fails the Job: only our launcher that stopped restarting (exit_codes.STUCK) does.
    assert [rule for rule in job["spec"]["podFailurePolicy"]["rules"] if rule["action"] == "FailJob"] == [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [STUCK]}}]


def test_numa_alignment_follows_the_runopt_over_the_named_resource() -> None:
    app = ddp(script="train.py", j="1x1", cpu=3, memMB=2048, image="img:1")
    aligned = check(build_request(app, app_id="a-abc12345", options=ManifestOptions(numa_aligned=True)))[1]
    resources = aligned["spec"]["template"]["spec"]["containers"][0]["resources"]
    # torchx's reserve of the node, left out: 100 millicores and 1024 MiB.
    assert resources["requests"] == resources["limits"] == {"cpu": "2", "memory": "1024Mi"}

    named = ddp(script="train.py", j="1x8", h="dgx_h100", image="img:1")
    off = check(build_request(named, app_id="a-abc12345", options=ManifestOptions(numa_aligned=False)))[1]
    assert "cpu" not in off["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]


def test_arguments_and_env_values_survive_the_kubelets_dollar_expansion() -> None:
    value = "$HOME $(HOME) $$(HOME) ${x} 'q' \"d\"\nnext"
    app = ddp(value, script="echo.py", j="1x1", image="img:1", env={"V": value})
    job = check(build_request(app, app_id="a-abc12345", options=ManifestOptions()))[1]
    container = job["spec"]["template"]["spec"]["containers"][0]

    assert kubelet_expand(container["args"][-1]) == value
    assert kubelet_expand(next(item["value"] for item in container["env"] if item["name"] == "V")) == value


def test_the_static_rendezvous_node_rank_is_the_pods_completion_index() -> None:
    app = ddp(script="train.py", j="2x1", image="img:1", rdzv_backend="static")
    job = check(build_request(app, app_id="a-abc12345", options=ManifestOptions()))[1]
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
    app_id = new_app_id(app_name, DNS_LABEL_IDS)
    for backend in BACKEND_NAMES:
        manifests = build_request(app, app_id=app_id, options=ManifestOptions(backend=backend))
        last = last_pod_hostname(manifests)
        assert DNS_LABEL.fullmatch(last) and len(last) <= 63, (backend, last)
        if backend == "jobset":  # its webhook checks the pods' names too: {hostname}-{5 random}
            assert len(f"{last}-abcde") <= 63, last
        top = manifests.objects[0]
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", top["metadata"]["name"])
        assert top["metadata"]["annotations"]["torchx-ext/app-name"] == app_name  # readable as given


def last_pod_hostname(manifests: KubernetesJobRequest) -> str:
    """The hostname each backend's controller gives the first role's last pod."""
    top = manifests.objects[-1]
    if manifests.backend == "jobset":
        replicated = top["spec"]["replicatedJobs"][0]
        return f"{top['metadata']['name']}-{replicated['name']}-0-{replicated['template']['spec']['completions'] - 1}"
    if manifests.backend == "volcano":
        task = top["spec"]["tasks"][0]
        return f"{top['metadata']['name']}-{task['name']}-{task['replicas'] - 1}"
    return f"{top['metadata']['name']}-{top['spec']['completions'] - 1}"


def test_distinct_apps_never_collide() -> None:
    ids = {new_app_id("train", DNS_LABEL_IDS) for _ in range(2000)}
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
        build_request(ddp(**arguments), app_id="a-abc12345", options=ManifestOptions())


def test_numa_alignment_without_cpu_or_memory_to_request_is_refused() -> None:
    role = specs.Role("trainer", image="img:1", entrypoint="python", resource=specs.Resource(cpu=0, gpu=0, memMB=0))
    with pytest.raises(InvalidArgumentError, match="NUMA-aligned pods need a cpu and memMB"):
        build_request(specs.AppDef("a", roles=[role]), app_id="a-abc12345",
                        options=ManifestOptions(numa_aligned=True))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (ManifestOptions(tolerations=("gpu:Sometimes",)), "invalid toleration 'gpu:Sometimes'"),
        (ManifestOptions(tolerations=("justakey",)), "expected KEY=VALUE:EFFECT"),
        (ManifestOptions(shm_size="lots"), "invalid shm_size 'lots'"),
        (ManifestOptions(shm_size="8Gi"), "more than the role's memory limit"),
        (ManifestOptions(image_pull_policy="Sometimes"), "expected one of Always, IfNotPresent, Never"),
        (ManifestOptions(namespace="Team_A"), "invalid namespace 'Team_A'"),
        (ManifestOptions(backend="kubeflow"), "invalid backend 'kubeflow': expected one of job, jobset, volcano"),
        (ManifestOptions(reserved_memmb=-1), "invalid reserved_memmb -1: expected an integer of 0 or more"),
        (ManifestOptions(efa_device_count=-2), "invalid efa_device_count -2"),
        (ManifestOptions(numa_aligned=True, reserved_memmb=1024), "less reserved_memmb=1024"),
    ],
)
def test_bad_options_are_refused_naming_the_value(options: ManifestOptions, expected: str) -> None:
    app = ddp(script="train.py", j="1x1", image="img:1", memMB=1024)
    with pytest.raises(InvalidArgumentError, match=re.escape(expected)):
        build_request(app, app_id="a-abc12345", options=options)


def pod_resources(app: specs.AppDef, options: ManifestOptions) -> dict[str, dict[str, str]]:
    job = check(build_request(app, app_id="a-abc12345", options=options))[-1]
    resources: dict[str, dict[str, str]] = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources


def test_torchx_reserve_options_leave_the_kubelets_share_out_of_the_requests() -> None:
    app = ddp(script="train.py", j="1x1", image="img:1", cpu=4, memMB=8192)

    default = pod_resources(app, ManifestOptions())
    given = pod_resources(app, ManifestOptions(reserved_millicpu=500, reserved_memmb=2048))
    aligned = pod_resources(app, ManifestOptions(reserved_millicpu=500, reserved_memmb=2048, numa_aligned=True))

    assert default == {"requests": {"cpu": "3900m", "memory": "7168Mi"}, "limits": {"memory": "8192Mi"}}
    assert given == {"requests": {"cpu": "3500m", "memory": "6144Mi"}, "limits": {"memory": "8192Mi"}}
    assert aligned["requests"] == aligned["limits"] == {"cpu": "3", "memory": "6144Mi"}


@pytest.mark.parametrize("count, efa", [(None, "32"), (0, None), (4, "4")])
def test_efa_device_count_overrides_the_named_resources_efa_as_torchx_does(count: int | None, efa: str | None) -> None:
    app = ddp(script="train.py", j="1x8", h="aws_p5.48xlarge", image="img:1")
    resources = pod_resources(app, ManifestOptions(efa_device_count=count))

    assert resources["limits"].get("vpc.amazonaws.com/efa") == resources["requests"].get("vpc.amazonaws.com/efa") == efa
    assert resources["limits"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize("backend", ["job", "jobset", "volcano"])
def test_every_role_of_a_two_role_app_gets_the_first_roles_replica_0_as_rank0_as_in_torchx(backend: str) -> None:
    roles = [specs.Role(name, image="img:1", entrypoint="python", num_replicas=2) for name in ("trainer", "reader")]
    objects = check(build_request(specs.AppDef("two", roles=roles), app_id="two-abc12345",
                                    options=ManifestOptions(backend=backend)))
    text = yaml.safe_dump_all(objects)

    rank0 = set(re.findall(r"name: TORCHX_RANK0_HOST\n\s+value: (\S+)", text))
    assert len(re.findall(r"name: TORCHX_RANK0_HOST", text)) == 2 and len(rank0) == 1, text
    assert rank0.pop().startswith("two-abc12345-trainer-")
    # Our launcher's rendezvous stays each role's own: its replica 0 hosts it.
    own = re.findall(r"name: TORCHX_EXT_RDZV_HOST\n\s+value: two-abc12345-(\w+)-", text)
    assert sorted(own) == ["reader", "trainer"], text


def first_pod(app: specs.AppDef, backend: str = "job") -> dict[str, Any]:
    obj = check(build_request(app, app_id="train-abc12345", options=ManifestOptions(backend=backend)))[-1]
    if backend == "volcano":
        return dict(obj["spec"]["tasks"][0]["template"])
    if backend == "jobset":
        return dict(obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    return dict(obj["spec"]["template"])


def test_pods_carry_torchx_labels_istio_opt_out_ports_image_and_field_refs_as_torchx_pods_do() -> None:
    app = ddp(script="train.py", j="2x1", image="registry.example/train:1", env={"POD": "[FIELD_PATH]metadata.name"})
    pod = first_pod(app)
    container = pod["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}

    assert pod["metadata"]["labels"].items() >= {
        "torchx.pytorch.org/app-name": "train", "torchx.pytorch.org/role-index": "0",
        "torchx.pytorch.org/role-name": "train", "app.kubernetes.io/name": "train",
        "app.kubernetes.io/managed-by": "torchx.pytorch.org", "app.kubernetes.io/instance": "train-abc12345"}.items()
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert container["ports"] == [{"name": "c10d", "containerPort": 29500}]
    assert env["TORCHX_IMAGE"] == {"name": "TORCHX_IMAGE", "value": "registry.example/train:1"}
    assert env["POD"] == {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}


OVERLAY = {"metadata": {"annotations": {"team": "ml"}},
           "spec": {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                    "volumes": ({"name": "creds", "secret": {"secretName": "s3"}},)}}


@pytest.mark.parametrize("backend", ["job", "jobset", "volcano"])
def test_a_pod_overlay_merges_dicts_appends_lists_and_a_tuple_replaces(backend: str) -> None:
    app = ddp(script="train.py", j="1x1", image="img:1")
    app.roles[0].metadata["kubernetes"] = {"V1Pod": OVERLAY}  # as torchx's set_overlay(role, "kubernetes", "V1Pod", ...)
    pod = first_pod(app, backend)

    assert pod["metadata"]["annotations"]["team"] == "ml" and "sidecar.istio.io/inject" in pod["metadata"]["annotations"]
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert pod["spec"]["tolerations"][-1] == {"key": "gpu", "operator": "Exists"} and len(pod["spec"]["tolerations"]) > 1
    assert pod["spec"]["volumes"] == [{"name": "creds", "secret": {"secretName": "s3"}}]


def test_a_pod_overlay_file_given_as_metadata_on_the_component_is_read(tmp_path: Path) -> None:
    path = tmp_path / "overlay.yaml"
    path.write_text("spec:\n  nodeSelector: {pool: gpu}\n  volumes: !!python/tuple\n  - {name: scratch, emptyDir: {}}\n")
    pod = first_pod(ddp(script="train.py", j="1x1", image="img:1", metadata={"kubernetes": f"file://{path}"}))

    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert pod["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]


def test_a_pod_overlay_that_cannot_be_read_is_one_line_naming_the_role(tmp_path: Path) -> None:
    app = ddp(script="train.py", j="1x1", image="img:1", metadata={"kubernetes": f"file://{tmp_path}/missing.yaml"})
    with pytest.raises(InvalidArgumentError, match=r"^role 'train': .*missing\.yaml[^\n]*$"):
        build_request(app, app_id="train-abc12345", options=ManifestOptions())


@pytest.mark.parametrize("policy, replicas, refused", [
    (specs.RetryPolicy.APPLICATION, 2, True), (specs.RetryPolicy.REPLICA, 2, False),
    (specs.RetryPolicy.APPLICATION, 1, False),  # one replica in all: restarting it is restarting the app
])
def test_the_job_backend_refuses_whole_app_retries_it_cannot_give_naming_the_backends_that_can(
    policy: specs.RetryPolicy, replicas: int, refused: bool
) -> None:
    role = specs.Role("worker", image="img:1", entrypoint="python", num_replicas=replicas, max_retries=2,
                      retry_policy=policy)
    app = specs.AppDef("mine", roles=[role])
    if not refused:
        check(build_request(app, app_id="mine-abc12345", options=ManifestOptions()))
        return
    with pytest.raises(InvalidArgumentError, match=r"^role 'worker': retry_policy APPLICATION .* backend=jobset or "
                                                   r"backend=volcano, or the role retry_policy REPLICA$"):
        build_request(app, app_id="mine-abc12345", options=ManifestOptions())
    check(build_request(app, app_id="mine-abc12345", options=ManifestOptions(backend="jobset")))


def test_roles_that_become_the_same_job_name_are_refused() -> None:
    roles = [specs.Role(name, image="img:1", entrypoint="python") for name in ("Trainer", "trainer!")]
    with pytest.raises(InvalidArgumentError, match="both become Job name 'a-abc12345-trainer'"):
        build_request(specs.AppDef("a", roles=roles), app_id="a-abc12345", options=ManifestOptions())


@pytest.mark.parametrize("policy, job_restarts, pod_retries", [
    # dist.ddp's REPLICA: the failed pod alone is replaced, as on the job backend.
    (specs.RetryPolicy.REPLICA, 0, 3),
    # torchx's default: the JobSet restarts every pod; the Job itself fails at its first failed pod.
    (specs.RetryPolicy.APPLICATION, 3, 0),
])
def test_a_jobset_has_a_replicated_job_per_role_restarts_as_the_retry_policy_says_and_the_first_role_decides_success(
        policy: specs.RetryPolicy, job_restarts: int, pod_retries: int) -> None:
    app = ddp("--lr", "0.1", script="train.py", j="2x2", image="registry.example/train:1", max_retries=3)
    app.roles[0].retry_policy = policy
    manifests = build_request(app, app_id="train-abc12345", options=ManifestOptions(backend="jobset"))

    (jobset,) = check(manifests)
    if policy == specs.RetryPolicy.REPLICA:
        golden("jobset_ddp_2x2", manifests)
    spec = jobset["spec"]
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["train"]}
    assert spec["failurePolicy"]["maxRestarts"] == job_restarts
    (replicated,) = spec["replicatedJobs"]
    job = replicated["template"]["spec"]
    assert job["backoffLimitPerIndex"] == pod_retries and job["completions"] == job["parallelism"] == 2
    env = {item["name"]: item["value"] for item in job["template"]["spec"]["containers"][0]["env"]}
    assert env["TORCHX_RANK0_HOST"] == "train-abc12345-train-0-0.train-abc12345"
    assert "subdomain" not in job["template"]["spec"]  # the JobSet controller sets its own
    assert "suspend" not in spec


@pytest.mark.parametrize("policy, action", [
    (specs.RetryPolicy.REPLICA, "RestartPod"),  # the failed pod alone
    (specs.RetryPolicy.APPLICATION, "RestartJob"),  # every pod
    *([(specs.RetryPolicy.ROLE, "RestartTask")] if hasattr(specs.RetryPolicy, "ROLE") else []),  # torchx-nightly
])
def test_a_volcano_task_restarts_what_its_roles_retry_policy_names(policy: specs.RetryPolicy, action: str) -> None:
    roles = [specs.Role(name, image="img:1", entrypoint="python", num_replicas=2, max_retries=2, retry_policy=policy)
             for name in ("trainer", "reader")]
    (job,) = check(build_request(specs.AppDef("mine", roles=roles), app_id="mine-abc12345",
                                   options=ManifestOptions(backend="volcano")))

    for task in job["spec"]["tasks"]:
        assert task["policies"] == [{"event": "PodFailed", "action": action}, {"event": "PodEvicted", "action": action}]
    # Volcano counts restarts per job: two for each replica where a restart is one pod's, else
    # two (torchx's least max_retries of the roles); plus the failure that ends the job.
    assert job["spec"]["maxRetry"] == (2 * 4 if action == "RestartPod" else 2) + 1


@pytest.mark.parametrize("retries", [0, 2])
def test_a_volcano_job_of_our_launcher_ends_when_its_attempts_are_stuck_at_one_point(retries: int) -> None:
    # exit_codes.STUCK: the launcher stopped restarting; Volcano takes the first policy that matches.
    (job,) = check(build_request(ddp(script="train.py", j="2x1", max_retries=retries), app_id="mine-abc12345",
                                 options=ManifestOptions(backend="volcano")))
    policies = job["spec"]["tasks"][0]["policies"]
    assert (policies[0] == {"exitCode": 3, "action": "TerminateJob"}) == (retries > 0), policies


def test_a_queued_jobset_is_created_suspended_with_kueues_label() -> None:
    app = ddp(script="train.py", j="4x8", h="aws_p5.48xlarge", image="registry.example/train:1")
    manifests = build_request(app, app_id="train-abc12345",
                                options=ManifestOptions(backend="jobset", queue="gpu-queue"))

    (jobset,) = check(manifests)
    golden("jobset_ddp_4x8_p5_queued", manifests)
    assert jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    job = jobset["spec"]["replicatedJobs"][0]["template"]
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"] and "suspend" not in job["spec"]


def test_a_volcano_job_is_torchxs_shape_with_our_pods_and_a_min_available_gang() -> None:
    app = ddp("--lr", "0.1", script="train.py", j="2x2", image="registry.example/train:1", max_retries=2)
    manifests = build_request(app, app_id="train-abc12345", options=ManifestOptions(backend="volcano"))

    (job,) = check(manifests)
    golden("volcano_ddp_2x2", manifests)
    spec = job["spec"]
    assert spec["schedulerName"] == "volcano" and spec["queue"] == "default" and spec["minAvailable"] == 2
    assert spec["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": []}
    # Two restarts for each of the two replicas, counted per job by Volcano, which also counts the
    # failure that ends the job.
    assert spec["maxRetry"] == 5
    (task,) = spec["tasks"]
    assert task["name"] == "train" and task["replicas"] == 2
    # dist.ddp asks for REPLICA: a failed pod restarts alone, the others re-rendezvous with it.
    assert {"event": "PodFailed", "action": "RestartPod"} in task["policies"]
    # No retries: a failed pod ends the job, which keeps the pods that ended (and their logs).
    once = check(build_request(ddp(script="train.py", j="2x2", image="img:1"), app_id="train-abc12345",
                                 options=ManifestOptions(backend="volcano")))[0]
    assert once["spec"]["tasks"][0]["policies"] == [{"event": "PodFailed", "action": "TerminateJob"},
                                                    {"event": "PodEvicted", "action": "TerminateJob"}]
    container = task["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["TORCHX_RANK0_HOST"] == "train-abc12345-train-0.train-abc12345"


def test_an_elastic_role_in_volcano_and_jobset_keeps_its_pods_failures_to_itself() -> None:
    app = ddp(script="train.py", j="2:4x1", image="img:1", max_retries=1)
    volcano = check(build_request(app, app_id="elastic-abc12345",
                                    options=ManifestOptions(backend="volcano", queue="research")))[0]
    golden("volcano_ddp_elastic_2_4", build_request(app, app_id="elastic-abc12345",
                                                      options=ManifestOptions(backend="volcano", queue="research")))
    task = volcano["spec"]["tasks"][0]
    assert volcano["spec"]["queue"] == "research" and volcano["spec"]["minAvailable"] == 2
    assert task["minAvailable"] == 2 and task["replicas"] == 4
    assert task["policies"] == []  # a failed pod stays failed, a deleted one is recreated: no restart of all

    jobset = check(build_request(app, app_id="elastic-abc12345", options=ManifestOptions(backend="jobset")))[0]
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["backoffLimitPerIndex"] == 1 and job["maxFailedIndexes"] == 2
    assert job["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}


@pytest.mark.parametrize("backend", ["jobset", "volcano"])
def test_the_replica_id_is_the_index_the_backends_controller_gives_each_pod(backend: str) -> None:
    app = ddp(script="train.py", j="2x1", image="img:1", rdzv_backend="static")
    (top,) = check(build_request(app, app_id="a-abc12345", options=ManifestOptions(backend=backend)))
    pod = (top["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] if backend == "jobset"
           else top["spec"]["tasks"][0]["template"])
    args = pod["spec"]["containers"][0]["args"]

    expected = "$(JOB_COMPLETION_INDEX)" if backend == "jobset" else "$(VC_TASK_INDEX)"
    assert args[args.index("--node-rank") + 1] == expected


@pytest.mark.parametrize("h, gpu_resource, asked", [
    ("dgx_h100", None, "nvidia.com/gpu"),
    (None, None, "nvidia.com/gpu"),  # --gpu N names no vendor
    ("dgx_h100", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb"),  # a MIG profile
    ("dgx_h100", "amd.com/gpu", "amd.com/gpu"),
])
def test_gpus_are_asked_as_the_vendors_resource_or_the_one_given(h: str | None, gpu_resource: str | None,
                                                                 asked: str) -> None:
    app = ddp(script="train.py", j="1x2", h=h, image="img:1") if h else ddp(script="train.py", j="1x2", gpu=2,
                                                                             image="img:1")
    job = check(build_request(app, app_id="g-abc12345", options=ManifestOptions(gpu_resource=gpu_resource)))[1]
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]

    expected = "8" if h else "2"
    assert resources["limits"][asked] == resources["requests"][asked] == expected
    assert [name for name in resources["limits"] if name.endswith("/gpu") or "/mig-" in name] == [asked]


@pytest.mark.parametrize("gpu_resource", ["gpu", "nvidia.com/", "kubernetes.io/gpu", "nvidia.com/mig 1g"])
def test_a_bad_gpu_resource_is_one_line_naming_it(gpu_resource: str) -> None:
    app = ddp(script="train.py", j="1x2", gpu=2, image="img:1")
    with pytest.raises(InvalidArgumentError, match=f"invalid gpu_resource {gpu_resource!r}: expected an extended"):
        build_request(app, app_id="g-abc12345", options=ManifestOptions(gpu_resource=gpu_resource))


def test_hot_spares_get_a_readiness_probe_that_fails_while_they_wait_on_the_job_backend_only() -> None:
    app = ddp(script="train.py", j="2x1", image="registry.example/train:1", spares=1)
    container = first_pod(app)["spec"]["containers"][0]

    assert container["readinessProbe"]["exec"]["command"][-2:] == ["--training", "/tmp/torchx_ext_liveness"]
    # A frozen pod's probes all time out: its liveness probe must kill it (after the grace period)
    # before its readiness probe, failing as often, shows it running and not ready, as a spare would.
    ready, live = container["readinessProbe"], container["livenessProbe"]
    not_ready_after = ready["failureThreshold"] * max(ready["periodSeconds"], ready["timeoutSeconds"])
    killed_after = (live["failureThreshold"] * max(live["periodSeconds"], live["timeoutSeconds"]) + live["periodSeconds"]
                    + live.get("terminationGracePeriodSeconds", first_pod(app)["spec"]["terminationGracePeriodSeconds"]))
    assert killed_after < not_ready_after, (killed_after, not_ready_after)
    assert "readinessProbe" not in first_pod(ddp(script="train.py", j="2x1", image="registry.example/train:1"))[
        "spec"]["containers"][0]
    for backend in ("jobset", "volcano"):
        with pytest.raises(InvalidArgumentError, match=f"HOT_SPARE .* backend={backend} restarts every pod: kubernetes holds spares with -cfg backend=job"):
            build_request(app, app_id="train-abc12345", options=ManifestOptions(backend=backend))


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_every_container_asks_for_what_pod_security_restricted_needs_and_the_user_only_when_given(backend: str) -> None:
    app = ddp(script="train.py", j="2x1", image="registry.example/train:1")

    assert first_pod(app, backend)["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    given = check(build_request(app, app_id="train-abc12345", options=ManifestOptions(backend=backend, run_as_user=1000)))
    assert yaml.safe_dump_all(given).count("runAsNonRoot: true\n") == 1
    assert yaml.safe_dump_all(given).count("runAsUser: 1000\n") == 1


@pytest.mark.parametrize("user", [0, -5, "alice", True])
def test_a_bad_run_as_user_is_one_line_naming_it(user: Any) -> None:
    app = ddp(script="train.py", j="1x1", image="img:1")
    with pytest.raises(InvalidArgumentError, match=rf"^invalid run_as_user {re.escape(repr(user))}: expected a user id "
                       r"of 1 or more, one the image has \(root, 0, is what Pod Security 'restricted' refuses\)$"):
        build_request(app, app_id="g-abc12345", options=ManifestOptions(run_as_user=user))


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_the_admission_check_finds_each_roles_pod_template_in_every_backend(backend: str) -> None:
    from torchx_ext.schedulers.kubernetes.names import ANNOTATION_ROLE_NAME
    from torchx_ext.schedulers.kubernetes.pod_security import pod_templates

    roles = [specs.Role(name, image="img:1", entrypoint="python", num_replicas=2) for name in ("trainer", "reader")]
    objects = build_request(specs.AppDef("two", roles=roles), app_id="two-abc12345",
                              options=ManifestOptions(backend=backend)).objects

    assert sorted(template["metadata"]["annotations"][ANNOTATION_ROLE_NAME]
                  for template in pod_templates(objects)) == ["reader", "trainer"]


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_a_network_policy_comes_first_and_lets_in_the_apps_own_pods_and_the_peers_named(backend: str) -> None:
    app = ddp(script="train.py", j="2x1", image="registry.example/train:1")
    options = ManifestOptions(backend=backend, namespace="ml", network_peers=(
        "app=prometheus", "namespace:monitoring", "10.1.0.0/16", "fd00::/8"))

    policy, *rest = check(build_request(app, app_id="train-abc12345", options=options))

    own = {"torchx-ext/app-id": "train-abc12345"}
    assert first_pod(app, backend)["metadata"]["labels"].items() >= own.items()
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["namespace"] == "ml"
    assert policy["spec"] == {"podSelector": {"matchLabels": own}, "policyTypes": ["Ingress"], "ingress": [{"from": [
        {"podSelector": {"matchLabels": own}}, {"podSelector": {"matchLabels": {"app": "prometheus"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        {"ipBlock": {"cidr": "10.1.0.0/16"}}, {"ipBlock": {"cidr": "fd00::/8"}}]}]}
    assert not any(obj["kind"] == "NetworkPolicy" for obj in check(build_request(
        app, app_id="train-abc12345", options=ManifestOptions(backend=backend))))


@pytest.mark.parametrize("peer", ["prometheus", "=x", "namespace:", "namespace:Bad_", "10.0.0.0/33", "a b=c"])
def test_a_bad_network_peer_is_one_line_naming_it_and_the_forms(peer: str) -> None:
    app = ddp(script="train.py", j="1x1", image="img:1")
    with pytest.raises(InvalidArgumentError, match=rf"^invalid network_peers entry {re.escape(repr(peer))}: expected "
                       r"LABEL=VALUE \(pods of the namespace\), namespace:NAME \(every pod of a namespace\) or a "
                       r"CIDR such as 10.0.0.0/8$"):
        build_request(app, app_id="g-abc12345", options=ManifestOptions(network_peers=(peer,)))

"""How one pod container becomes a Docker container: command and args, env, hostname and network
aliases, volumes, resources and the termination-message file."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tests.kubernetes.apiserver.quantities import parse_quantity
from tests.kubernetes.apiserver.resources import Obj

LABEL_PREFIX = "torchx-ext-test.kube"
POD_LABEL = f"{LABEL_PREFIX}/pod"
UID_LABEL = f"{LABEL_PREFIX}/uid"
CONTAINER_LABEL = f"{LABEL_PREFIX}/container"
CLUSTER_LABEL = f"{LABEL_PREFIX}/cluster"
_ANNOTATION_REF = re.compile(r"^metadata\.(annotations|labels)\['(.+)'\]$")


def network_name(namespace: str) -> str:
    return f"torchx-ext-test-kube-{namespace}"


def field_value(pod: Obj, path: str, pod_ip: str) -> str:
    """What a ``valueFrom.fieldRef`` resolves to (the subset a launcher reads)."""
    meta = pod["metadata"]
    simple = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
              "metadata.uid": meta["uid"], "status.podIP": pod_ip, "spec.nodeName": pod["spec"].get("nodeName", ""),
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"), "status.hostIP": "127.0.0.1"}
    if path in simple:
        return str(simple[path])
    if match := _ANNOTATION_REF.match(path):
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    return ""


def environment(pod: Obj, container: Obj, pod_ip: str = "") -> dict[str, str]:
    """The container's env as the kubelet makes it: a value may refer to variables defined
    before it as ``$(NAME)`` (``$$`` is a literal ``$``)."""
    env: dict[str, str] = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = expand(str(variable["value"]), env)
        elif field_ref := (variable.get("valueFrom") or {}).get("fieldRef"):
            env[variable["name"]] = field_value(pod, field_ref.get("fieldPath", ""), pod_ip)
    return env


def argv(container: Obj, env: dict[str, str]) -> tuple[list[str] | None, list[str] | None]:
    """``command`` and ``args`` with ``$(NAME)`` references to the container's env expanded."""
    command, args = container.get("command"), container.get("args")
    return ([expand(item, env) for item in command] if command is not None else None,
            [expand(item, env) for item in args] if args is not None else None)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' dependent-variable expansion: ``$$`` -> ``$``; ``$(NAME)`` -> its value when
    NAME is defined, else left as written; any other ``$`` as is."""
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char == "$" and position + 1 < len(text):
            following = text[position + 1]
            if following == "$":
                out.append("$")
                position += 2
                continue
            if following == "(":
                close = text.find(")", position + 2)
                if close != -1 and text[position + 2:close] in env:
                    out.append(env[text[position + 2:close]])
                    position = close + 1
                    continue
        out.append(char)
        position += 1
    return "".join(out)


def aliases(pod: Obj, services: dict[str, Obj]) -> list[str]:
    """The pod's DNS names: its hostname, and under its subdomain when a headless Service of
    that name selects it (the cluster DNS answers from that Service's endpoints; the pod is
    not ready when its container starts, so only a Service publishing not-ready addresses counts)."""
    spec, namespace = pod["spec"], pod["metadata"].get("namespace", "default")
    hostname = spec.get("hostname") or pod["metadata"]["name"]
    names = [hostname]
    subdomain = spec.get("subdomain")
    service = services.get(subdomain or "")
    service_spec = (service or {}).get("spec") or {}
    selector = service_spec.get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    if (service is not None and service_spec.get("clusterIP") == "None" and selector
            and service_spec.get("publishNotReadyAddresses")
            and all(labels.get(key) == value for key, value in selector.items())):
        names += [f"{hostname}.{subdomain}", f"{hostname}.{subdomain}.{namespace}",
                  f"{hostname}.{subdomain}.{namespace}.svc", f"{hostname}.{subdomain}.{namespace}.svc.cluster.local"]
    return names


def host_config_args(pod: Obj, container: Obj, pod_dir: Path, cpus: list[int], cpu_mems: list[int],
                     node_mounts: tuple[str, ...]) -> tuple[dict[str, Any], Path]:
    """Arguments of the SDK's ``create_host_config`` (without network) and the termination-log file."""
    binds = [f"{path}:{path}:ro" for path in node_mounts]
    tmpfs: dict[str, str] = {}
    shm_size: int | None = None
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name"), {})
        target, read_only = mount["mountPath"], bool(mount.get("readOnly"))
        if "hostPath" in volume:
            binds.append(f"{volume['hostPath']['path']}:{target}:{'ro' if read_only else 'rw'}")
        elif "emptyDir" in volume:
            empty = volume["emptyDir"] or {}
            if empty.get("medium") == "Memory" and target == "/dev/shm":
                shm_size = int(parse_quantity(empty.get("sizeLimit", "64Mi")))
            elif empty.get("medium") == "Memory":
                tmpfs[target] = f"size={int(parse_quantity(empty['sizeLimit']))}" if empty.get("sizeLimit") else ""
            else:
                # A host directory, so that the pod's containers share it as an emptyDir is shared.
                shared = pod_dir / "volumes" / volume["name"]
                shared.mkdir(parents=True, exist_ok=True)
                os.chmod(shared, 0o777)
                binds.append(f"{shared}:{target}:{'ro' if read_only else 'rw'}")
    # The kubelet bind-mounts an empty file where the container may write its termination message.
    message_file = pod_dir / container["name"] / "termination-log"
    message_file.parent.mkdir(parents=True, exist_ok=True)
    message_file.touch()
    os.chmod(message_file, 0o666)
    binds.append(f"{message_file}:{container.get('terminationMessagePath', '/dev/termination-log')}:rw")
    limits = (container.get("resources") or {}).get("limits") or {}
    args: dict[str, Any] = {"binds": binds}
    if tmpfs:
        args["tmpfs"] = tmpfs
    if shm_size:
        args["shm_size"] = shm_size
    if "memory" in limits:
        args["mem_limit"] = int(parse_quantity(limits["memory"]))
    usable = os.sched_getaffinity(0)
    if cpus and set(cpus) <= usable:
        # Only CPUs this host has: a test may describe a bigger machine than it runs on.
        args["cpuset_cpus"] = ",".join(map(str, cpus))
        if cpu_mems and all(Path(f"/sys/devices/system/node/node{n}").exists() for n in cpu_mems):
            args["cpuset_mems"] = ",".join(map(str, cpu_mems))
    elif "cpu" in limits:
        args["nano_cpus"] = int(parse_quantity(limits["cpu"]) * 10**9)
    args.update(_security_args(pod, container))
    return args, message_file


def _security_args(pod: Obj, container: Obj) -> dict[str, Any]:
    """The container's securityContext as the runtime applies it (capabilities, no_new_privs,
    seccomp: Docker's default profile is RuntimeDefault), so a test pod runs as restricted as asked.
    Not ``runAsUser``: the test image's interpreter is the host's, under /root (mode 700), which
    no other user can run; admission checks the field, and the pods here run as root without any
    capability instead."""
    context = {**(pod["spec"].get("securityContext") or {}), **(container.get("securityContext") or {})}
    capabilities = context.get("capabilities") or {}
    args: dict[str, Any] = {}
    if capabilities.get("drop"):
        args["cap_drop"] = list(capabilities["drop"])
    if capabilities.get("add"):
        args["cap_add"] = list(capabilities["add"])
    if context.get("allowPrivilegeEscalation") is False:
        args["security_opt"] = ["no-new-privileges"]
    if context.get("privileged"):
        args["privileged"] = True
    return args


def labels(pod: Obj, container: Obj, cluster_id: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {POD_LABEL: f"{meta.get('namespace', '')}/{meta['name']}", UID_LABEL: meta["uid"],
            CONTAINER_LABEL: container["name"], CLUSTER_LABEL: cluster_id}

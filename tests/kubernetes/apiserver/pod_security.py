"""Pod Security admission, as the API server enforces a namespace's
``pod-security.kubernetes.io/enforce`` label on every pod created in it (by a client or by a
controller): the "baseline" and "restricted" checks a training pod can meet, with the real
admission's reasons, details and order (baseline checks first, then restricted, each sorted).
Workload objects (Jobs, JobSets) are not checked: only the pods they create are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.kubernetes.apiserver.errors import ApiError

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
RESTRICTED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                      "secret")
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                         "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
Obj = dict[str, Any]
Check = Callable[[Obj, list[Obj]], "str | None"]


def admit(pod: Obj, namespace: Obj | None) -> None:
    """Raise the admission's 403 when ``pod`` breaks its namespace's enforced level."""
    level = ((namespace or {}).get("metadata", {}).get("labels") or {}).get(ENFORCE_LABEL)
    if not level or level == "privileged":
        return
    if level not in LEVELS:
        level = "restricted"  # as the admission treats a level it does not know
    containers = [*(pod["spec"].get("initContainers") or []), *(pod["spec"].get("containers") or []),
                  *(pod["spec"].get("ephemeralContainers") or [])]
    checks = sorted((item for item in _BASELINE if level == "baseline" or item[0] not in _REPLACED), key=lambda i: i[0])
    if level == "restricted":
        checks += sorted(_RESTRICTED, key=lambda item: item[0])
    found = [reason for _, check in checks if (reason := check(pod, containers))]
    if found:
        name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
        raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": '
                       + ", ".join(found))


def _named(containers: list[Obj]) -> str:
    names = ", ".join(f'"{container["name"]}"' for container in containers)
    return f"container {names}" if len(containers) == 1 else f"containers {names}"


def _context(container: Obj) -> Obj:
    return container.get("securityContext") or {}


def _host_namespaces(pod: Obj, _: list[Obj]) -> str | None:
    given = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if pod["spec"].get(key)]
    return f"host namespaces ({', '.join(given)})" if given else None


def _privileged(_: Obj, containers: list[Obj]) -> str | None:
    bad = [container for container in containers if _context(container).get("privileged")]
    return f"privileged ({_named(bad)} must not set securityContext.privileged=true)" if bad else None


def _baseline_capabilities(_: Obj, containers: list[Obj]) -> str | None:
    added = sorted({cap for container in containers
                    for cap in (_context(container).get("capabilities") or {}).get("add") or []} - BASELINE_CAPABILITIES)
    return f"non-default capabilities (capabilities {', '.join(repr(cap) for cap in added)})" if added else None


def _host_path(pod: Obj, _: list[Obj]) -> str | None:
    names = [volume["name"] for volume in pod["spec"].get("volumes") or [] if "hostPath" in volume]
    return f"hostPath volumes (volumes {', '.join(repr(name) for name in names)})" if names else None


def _host_ports(_: Obj, containers: list[Obj]) -> str | None:
    bad = [container for container in containers if any(port.get("hostPort") for port in container.get("ports") or [])]
    return f"hostPort ({_named(bad)} uses hostPort)" if bad else None


def _seccomp_baseline(pod: Obj, containers: list[Obj]) -> str | None:
    profiles = [((pod["spec"].get("securityContext") or {}).get("seccompProfile") or {}).get("type")]
    profiles += [(_context(container).get("seccompProfile") or {}).get("type") for container in containers]
    return 'seccompProfile (type "Unconfined")' if "Unconfined" in profiles else None


def _volume_types(pod: Obj, _: list[Obj]) -> str | None:
    bad = [volume["name"] for volume in pod["spec"].get("volumes") or []
           if not any(kind in volume for kind in RESTRICTED_VOLUMES)]
    return f"restricted volume types (volumes {', '.join(repr(name) for name in bad)})" if bad else None


def _privilege_escalation(_: Obj, containers: list[Obj]) -> str | None:
    bad = [container for container in containers if _context(container).get("allowPrivilegeEscalation") is not False]
    return (f"allowPrivilegeEscalation != false ({_named(bad)} must set "
            "securityContext.allowPrivilegeEscalation=false)") if bad else None


def _capabilities(_: Obj, containers: list[Obj]) -> str | None:
    bad = [container for container in containers
           if "ALL" not in ((_context(container).get("capabilities") or {}).get("drop") or [])
           or set((_context(container).get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}]
    return f'unrestricted capabilities ({_named(bad)} must set securityContext.capabilities.drop=["ALL"])' if bad else None


def _non_root(pod: Obj, containers: list[Obj]) -> str | None:
    at_pod = (pod["spec"].get("securityContext") or {}).get("runAsNonRoot")
    bad = [container for container in containers
           if _context(container).get("runAsNonRoot", at_pod) is not True]
    if bad or at_pod is False:
        return f"runAsNonRoot != true (pod or {_named(bad or containers)} must set securityContext.runAsNonRoot=true)"
    return None


def _root_user(pod: Obj, containers: list[Obj]) -> str | None:
    at_pod = (pod["spec"].get("securityContext") or {}).get("runAsUser")
    bad = [container for container in containers if _context(container).get("runAsUser") == 0]
    if bad or at_pod == 0:
        return f"runAsUser=0 (pod or {_named(bad or containers)} must not set runAsUser=0)"
    return None


def _seccomp(pod: Obj, containers: list[Obj]) -> str | None:
    at_pod = ((pod["spec"].get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    bad = [container for container in containers
           if (_context(container).get("seccompProfile") or {}).get("type", at_pod) not in ("RuntimeDefault", "Localhost")]
    return (f'seccompProfile (pod or {_named(bad)} must set securityContext.seccompProfile.type to "RuntimeDefault" '
            'or "Localhost")') if bad else None


_BASELINE: list[tuple[str, Check]] = [
    ("hostNamespaces", _host_namespaces), ("privileged", _privileged), ("capabilities_baseline", _baseline_capabilities),
    ("hostPathVolumes", _host_path), ("hostPorts", _host_ports), ("seccompProfile_baseline", _seccomp_baseline),
]
_RESTRICTED: list[tuple[str, Check]] = [
    ("allowPrivilegeEscalation", _privilege_escalation), ("capabilities_restricted", _capabilities),
    ("restrictedVolumes", _volume_types), ("runAsNonRoot", _non_root), ("runAsUser", _root_user),
    ("seccompProfile_restricted", _seccomp),
]
_REPLACED = ("capabilities_baseline", "hostPathVolumes", "seccompProfile_baseline")
"""Baseline checks that restricted ones replace (its volume types exclude hostPath)."""

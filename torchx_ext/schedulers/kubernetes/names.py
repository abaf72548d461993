"""Object names, our labels and annotations (keys and values): every one valid for the API,
every one readable.

Kubernetes refuses a Job whose name is not a DNS-1123 label of at most 63 characters (it
becomes a label value on its pods), a Service not an RFC 1035 label, and a pod hostname
({job}-{index}) over 63 characters. The app id (``common.app_ids.DNS_LABEL_IDS``, at most 40)
names the Service and leaves room for ``-{role}-{index}`` in the rest.
"""

from __future__ import annotations

import re

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.role_policy import RolePolicy

NAME_MAX = 63
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE_MAX = 63

PREFIX = "torchx-ext/"
LABEL_APP_ID = PREFIX + "app-id"
LABEL_APP_NAME = PREFIX + "app-name"
LABEL_ROLE = PREFIX + "role"
ANNOTATION_APP_NAME = PREFIX + "app-name"
ANNOTATION_ROLE_NAME = PREFIX + "role-name"
ANNOTATION_POLICY = PREFIX + "policy"
"""The role's policy, whole (``RolePolicy.to_text``), on its Job (or Volcano task's pods)."""
ANNOTATION_MIN_REPLICAS = PREFIX + "min-replicas"
"""What jobs submitted before ``ANNOTATION_POLICY`` carry instead (read, no longer written)."""
ANNOTATION_PULL_TIMEOUT = PREFIX + "image-pull-timeout"
ANNOTATION_END = PREFIX + "end"
"""Set on every Job of an app that was cancelled, or ended by us (an image that never pulls)."""
# Set by the Job controller on every pod it creates; its value is the replica id.
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
# On the Workload Kueue makes for a queued Job or JobSet: that object's uid.
LABEL_KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
# torchx's own labels, which dashboards and users' tools select torchx pods on.
TORCHX_LABEL_VERSION = "torchx.pytorch.org/version"
TORCHX_LABEL_APP_NAME = "torchx.pytorch.org/app-name"
TORCHX_LABEL_ROLE_INDEX = "torchx.pytorch.org/role-index"
TORCHX_LABEL_ROLE_NAME = "torchx.pytorch.org/role-name"
KUBE_LABEL_NAME = "app.kubernetes.io/name"
KUBE_LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
KUBE_LABEL_INSTANCE = "app.kubernetes.io/instance"
ANNOTATION_ISTIO_SIDECAR = "sidecar.istio.io/inject"


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both ends)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:LABEL_VALUE_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


def job_names(app_id: str, roles: list[tuple[str, int]], reserve: int = 0) -> dict[str, str]:
    """role name -> Job name, for ``roles`` as (name, replicas): ``{app_id}-{role}`` cut so
    that the last pod's hostname ``{job}-{replicas - 1}`` is a DNS label of at most 63, with
    ``reserve`` characters left for what a backend adds after the role (a JobSet's ``-0``)."""
    names: dict[str, str] = {}
    for role, replicas in roles:
        slug = re.sub(r"[^a-z0-9-]+", "-", role.lower()).strip("-") or "role"
        room = NAME_MAX - len(app_id) - 1 - 1 - len(str(max(replicas - 1, 0))) - reserve
        if room < 1:
            raise InvalidArgumentError(
                f"role {role!r} has {replicas} replicas: hostnames {app_id}-{{role}}-{{index}} cannot be made "
                f"{NAME_MAX}-character DNS labels; give the app a shorter name or the role fewer replicas"
            )
        name = f"{app_id}-{slug[:room].rstrip('-') or 'r'}"
        if name in names.values():
            other = next(key for key, value in names.items() if value == name)
            raise InvalidArgumentError(
                f"roles {other!r} and {role!r} both become Job name {name!r} (role names are cut to "
                f"[a-z0-9-] and to fit {NAME_MAX}-character hostnames): give roles names that differ in their "
                "first letters or digits"
            )
        names[role] = name
    return names


def pod_hostname(job_name: str, index: int) -> str:
    """The hostname the Job controller gives an Indexed Job's pod."""
    return f"{job_name}-{index}"


def check_dns_label(name: str, what: str) -> str:
    if len(name) > NAME_MAX or not DNS_LABEL.fullmatch(name):
        raise InvalidArgumentError(
            f"invalid {what} {name!r}: expected a DNS label, at most {NAME_MAX} of a-z, 0-9 and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return name


def app_labels(app: specs.AppDef, app_id: str) -> dict[str, str]:
    return {LABEL_APP_ID: app_id, LABEL_APP_NAME: label_value(app.name) or "app"}


def role_labels(app: specs.AppDef, role: specs.Role, app_id: str) -> dict[str, str]:
    """Ours, and torchx's pod labels but its replica id (a role's pods share one template here:
    ``batch.kubernetes.io/job-completion-index`` or Volcano's task index tells them apart)."""
    import torchx

    index = next(position for position, candidate in enumerate(app.roles) if candidate is role)
    return {
        **app_labels(app, app_id),
        LABEL_ROLE: label_value(role.name) or "role",
        TORCHX_LABEL_VERSION: label_value(str(torchx.__version__)),
        TORCHX_LABEL_APP_NAME: label_value(app.name),
        TORCHX_LABEL_ROLE_INDEX: str(index),
        TORCHX_LABEL_ROLE_NAME: label_value(role.name),
        KUBE_LABEL_NAME: label_value(app.name),
        KUBE_LABEL_MANAGED_BY: "torchx.pytorch.org",
        KUBE_LABEL_INSTANCE: app_id,
    }


def role_annotations(app: specs.AppDef, role: specs.Role, policy: RolePolicy, pull_timeout_s: int) -> dict[str, str]:
    return {
        ANNOTATION_APP_NAME: app.name,
        ANNOTATION_ROLE_NAME: role.name,
        ANNOTATION_POLICY: policy.to_text(),
        ANNOTATION_PULL_TIMEOUT: str(pull_timeout_s),
    }

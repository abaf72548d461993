"""What `kubernetes` creates for an app, built purely from its AppDef: a thin dispatch over the
backends, after the checks they share.

- ``job``: a headless Service and one Indexed ``batch/v1`` Job per role (``indexed_job.py``);
- ``jobset``: one JobSet (``jobset.py``) whose replicated jobs are those same Jobs;
- ``volcano``: one Volcano Job (``volcano.py``) with a task per role.

Every backend runs the same pod template (``pods.py``). Nothing here talks to the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchx import specs

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.role_metadata import is_torchft
from torchx_ext.schedulers.backends import SPARES, TORCHFT, backend_named
from torchx_ext.schedulers.common.role_policy import RolePolicy, app_replicas, check_replica_counts, policies_of
from torchx_ext.schedulers.common.checks import check_image
from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.indexed_job import job_objects
from torchx_ext.schedulers.kubernetes.jobset import jobset
from torchx_ext.schedulers.kubernetes.network_policy import network_policy, wants_network_policy
from torchx_ext.schedulers.kubernetes.options import IMAGE_HINT, ManifestOptions
from torchx_ext.schedulers.kubernetes.volcano import volcano_job
from torchx_ext.schedulers.kubernetes.workspace import PendingPush

@dataclass(frozen=True)
class KubernetesJobRequest:
    app_id: str
    namespace: str
    backend: str
    objects: tuple[dict[str, Any], ...]
    """In creation order (what a later object needs exists first)."""
    pushes: tuple[PendingPush, ...] = ()
    """Workspace images, pushed at submission; the objects then name their digests."""
    validate: bool = True
    """``validate_spec``: the API server's dry run of every object before any is created."""
    queue: str | None = None
    """``-cfg queue``: Kueue's LocalQueue (job, jobset) or Volcano's queue, checked at submission."""

    def to_yaml(self) -> str:
        import yaml

        text: str = yaml.safe_dump_all(self.objects, sort_keys=False, width=120)
        said = "".join(f"# {push.reference}: the workspace image {push.image}, pushed at submission; the pods "
                       "name its digest\n" for push in self.pushes)
        return said + text

    def __str__(self) -> str:
        return self.to_yaml()


def build_request(app: specs.AppDef, *, app_id: str, options: ManifestOptions,
                    pushes: tuple[PendingPush, ...] = ()) -> KubernetesJobRequest:
    """The objects ``kubernetes`` creates for ``app`` (``pushes``: the workspace images its roles
    name, pushed at submission); InvalidArgumentError names bad input."""
    names.check_dns_label(app_id, "app id")
    names.check_dns_label(options.namespace, "namespace")
    options.check()
    for role in app.roles:
        check_role(role)
    policies = policies_of(app)  # decided once here, for every builder below
    if options.backend == "job":
        check_job_backend_retries(app, policies)
    else:
        check_no_spares(policies, options.backend)
        check_no_torchft(app, options.backend)
    if options.backend == "jobset":
        objects: tuple[dict[str, Any], ...] = (jobset(app, policies, app_id, options),)
    elif options.backend == "volcano":
        objects = (volcano_job(app, policies, app_id, options),)
    else:
        objects = job_objects(app, policies, app_id, options)
    if wants_network_policy(options):  # first: no pod of the app runs before it is in place
        objects = (network_policy(app, app_id, options), *objects)
    return KubernetesJobRequest(app_id, options.namespace, options.backend, objects, pushes, options.validate_spec,
                        options.queue)


def check_job_backend_retries(app: specs.AppDef, policies: dict[str, RolePolicy]) -> None:
    """Indexed Jobs start a failed pod again, alone: a role whose retries must restart the whole
    app (torchx's APPLICATION, its default) needs a backend that restarts it. With one replica in
    all, the two are the same."""
    for role in app.roles:
        if policies[role.name].restarts_whole_app(app_replicas(app)):
            raise InvalidArgumentError(
                f"role {role.name!r}: retry_policy APPLICATION (torchx's default) with max_retries {role.max_retries} "
                "restarts the whole app, and the job backend starts a failed replica again alone: give -cfg "
                "backend=jobset or backend=volcano, or the role retry_policy REPLICA")


def check_no_spares(policies: dict[str, RolePolicy], backend: str) -> None:
    """JobSet and Volcano restart every pod when one fails: a spare would be restarted with the
    rest, never take the lost one's place (kubernetes' ``Backend`` says where it holds spares)."""
    declared = backend_named("kubernetes")
    where = (declared.supports.get(SPARES) if declared is not None else None) or "with -cfg backend=job"
    for name, policy in policies.items():
        if policy.has_spares:
            raise InvalidArgumentError(
                f"role {name!r}: retry_policy HOT_SPARE (hot spares, e.g. dist.ddp --spares) needs a failed "
                f"replica started again alone, and backend={backend} restarts every pod: kubernetes holds spares "
                f"{where}")


def check_no_torchft(app: specs.AppDef, backend: str) -> None:
    """A torchft job's groups go on while a lost one starts again alone: kubernetes runs them where
    its ``Backend`` says (JobSet and Volcano restart every pod once a group's retries are spent)."""
    declared = backend_named("kubernetes")
    where = (declared.supports.get(TORCHFT) if declared is not None else None) or "with -cfg backend=job"
    if any(is_torchft(role.metadata or {}) for role in app.roles):
        raise InvalidArgumentError(
            f"a torchft job (dist.hsdp) needs each replica group started again alone, and backend={backend} "
            f"restarts every pod when a group's Job fails: kubernetes runs torchft jobs {where}")


def check_role(role: specs.Role) -> None:
    check_image(role, IMAGE_HINT)
    if role.num_replicas < 1:
        raise InvalidArgumentError(f"role {role.name!r} has {role.num_replicas} replicas: expected 1 or more")
    check_replica_counts(role)

"""A role as plain data: kept in a job's record as submitted, and a torchx Role again for describe."""

from __future__ import annotations

from typing import Any, Mapping

from torchx import specs

from torchx_ext.role_metadata import spares_of


def role_from_spec(spec: Mapping[str, Any]) -> specs.Role:
    resource = spec["resource"]
    return specs.Role(
        name=spec["name"],
        image=spec["image"],
        entrypoint=spec["entrypoint"],
        args=list(spec["args"]),
        env=dict(spec["env"]),
        num_replicas=spec["num_replicas"],
        max_retries=spec["max_retries"],
        resource=specs.Resource(cpu=resource["cpu"], gpu=resource["gpu"], memMB=resource["memMB"]),
        port_map=dict(spec["port_map"]),
        # A record from before retry policies were kept: its job restarted replicas one by one.
        # (A policy this torchx line lacks, e.g. HOT_SPARE on torchx-nightly, reads as REPLICA.)
        retry_policy=specs.RetryPolicy(spec.get("retry_policy", "REPLICA"))
        if spec.get("retry_policy", "REPLICA") in specs.RetryPolicy.__members__ else specs.RetryPolicy.REPLICA,
    )


def role_spec(role: specs.Role) -> dict[str, Any]:
    return {
        "name": role.name,
        "image": role.image,
        "entrypoint": role.entrypoint,
        "args": list(role.args),
        "env": dict(role.env),
        "num_replicas": role.num_replicas,
        "max_retries": role.max_retries,
        "resource": {"cpu": role.resource.cpu, "gpu": role.resource.gpu, "memMB": role.resource.memMB},
        "port_map": dict(role.port_map),
        "retry_policy": retry_policy_of(role),
        "hot_spares": has_hot_spares(role),
    }


def retry_policy_of(role: specs.Role) -> str:
    """``REPLICA``, ``APPLICATION`` or ``HOT_SPARE`` (torchx 0.7.0), ``ROLE`` (torchx-nightly),
    however the role spells it."""
    return str(specs.RetryPolicy(role.retry_policy).value)


def has_hot_spares(role: specs.Role) -> bool:
    """Whether ``num_replicas`` minus ``min_replicas`` of the role are hot spares: torchx's
    HOT_SPARE, or the spares ``dist.*`` record (``role_metadata.HOT_SPARES_KEY``)."""
    return retry_policy_of(role) == "HOT_SPARE" or spares_of(role.metadata or {}) > 0

"""A role as plain data: kept in a job's record as submitted, and a torchx Role again for describe.

What a backend acts on (retry policy, replica counts, spares) is the role's ``RolePolicy``
(``role_policy.py``), kept next to this spec, not in it.
"""

from __future__ import annotations

from typing import Any, Mapping

from torchx import specs

from torchx_ext.schedulers.common.role_policy import RolePolicy


def role_from_spec(spec: Mapping[str, Any], policy: RolePolicy) -> specs.Role:
    resource = spec["resource"]
    return specs.Role(
        name=spec["name"],
        image=spec["image"],
        entrypoint=spec["entrypoint"],
        args=list(spec["args"]),
        env=dict(spec["env"]),
        num_replicas=policy.num_replicas,
        max_retries=policy.max_retries,
        resource=specs.Resource(cpu=resource["cpu"], gpu=resource["gpu"], memMB=resource["memMB"]),
        port_map=dict(spec["port_map"]),
        # A policy this torchx line lacks (HOT_SPARE on torchx-nightly) reads as REPLICA.
        retry_policy=specs.RetryPolicy(policy.retry_policy)
        if policy.retry_policy in specs.RetryPolicy.__members__ else specs.RetryPolicy.REPLICA,
    )


def role_spec(role: specs.Role) -> dict[str, Any]:
    return {
        "name": role.name,
        "image": role.image,
        "entrypoint": role.entrypoint,
        "args": list(role.args),
        "env": dict(role.env),
        "resource": {"cpu": role.resource.cpu, "gpu": role.resource.gpu, "memMB": role.resource.memMB},
        "port_map": dict(role.port_map),
    }

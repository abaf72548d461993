"""local_cwd's request: what a job runs, one process per replica, as ``build.py`` makes it from an
AppDef and the job's supervisor reads it back from ``request.json`` (``records.LocalJobDir``).

Standard library only: the supervisor imports this module and should start fast.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torchx_ext.errors import JobRecordError
from torchx_ext.schedulers.common.record_json import FORMAT_KEY, fields_of, list_of, versioned
from torchx_ext.schedulers.common.role_policy import RolePolicy, format_1_role

REQUEST_FORMAT = 2
"""The request's: each role's policy kept once (``policy``). Format 1 requests are read too."""


@dataclass(frozen=True)
class ReplicaRequest:
    role: str
    replica_id: int
    argv: list[str]
    env: dict[str, str]
    """Added to (and overriding) the environment of the process that submitted the job."""
    cwd: str
    cpus: list[int] | None
    """The replica's CPU affinity; None: the submitter's."""
    log_dir: str

    def log_path(self, stream: str) -> Path:
        return Path(self.log_dir) / f"{stream}.log"


@dataclass(frozen=True)
class LocalRoleRequest:
    name: str
    replicas: list[ReplicaRequest]
    spec: dict[str, Any]
    """The role as submitted (before macros), for describe."""
    policy: RolePolicy
    """What a failure restarts, and how many replicas the role needs (``common/role_policy.py``)."""

    @property
    def needed(self) -> int:
        """An elastic role carries on while this many of its replicas have not failed for good."""
        return min(self.policy.min_replicas, len(self.replicas))


@dataclass(frozen=True)
class LocalJobRequest:
    app_id: str
    app_dir: str
    roles: list[LocalRoleRequest]
    slices: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cancel_grace_s: float = 10.0
    warm: bool = False
    """Whether its processes are forked by the warm interpreter (``torchx_ext/warm``)."""

    def replicas(self) -> list[ReplicaRequest]:
        return [replica for role in self.roles for replica in role.replicas]

    def to_json(self) -> str:
        return json.dumps({FORMAT_KEY: REQUEST_FORMAT, **asdict(self)}, indent=1)

    @staticmethod
    def from_json(text: str) -> "LocalJobRequest":
        version, data = versioned(text, (1, REQUEST_FORMAT))
        roles = [_role(role if version == REQUEST_FORMAT else _format_1_role(role))
                 for role in list_of(data.pop("roles", None))]
        return LocalJobRequest(**{**fields_of(LocalJobRequest, {**data, "roles": []}), "roles": roles})


def _role(role: object) -> LocalRoleRequest:
    data = fields_of(LocalRoleRequest, role)
    policy = data["policy"]
    return LocalRoleRequest(**{
        **data,
        "replicas": [ReplicaRequest(**fields_of(ReplicaRequest, replica)) for replica in list_of(data["replicas"])],
        "policy": policy if isinstance(policy, RolePolicy) else RolePolicy(**fields_of(RolePolicy, policy)),
    })


def _format_1_role(role: object) -> dict[str, Any]:
    if not isinstance(role, dict):
        raise JobRecordError(f"expected an object for a role, found {type(role).__name__}")
    return format_1_role(role)

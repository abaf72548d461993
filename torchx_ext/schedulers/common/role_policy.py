"""What a role's spec means to a backend, decided here once: what a failure restarts, how many
replicas it needs, whether it is elastic, whether it has hot spares.

torchx states the policy as a ``retry_policy`` name (``REPLICA``, ``APPLICATION``, ``HOT_SPARE``
on torchx 0.7.0, ``ROLE`` on torchx-nightly) next to ``max_retries``, ``num_replicas`` and
``min_replicas``; ``dist.* --spares`` also records its spares in the role's metadata, since
torchx-nightly has no ``HOT_SPARE``. Backends ask the questions below and never compare a
policy's name themselves: the way torch elastic asks ``WorkerState.is_running``.

Each backend's ``build_request`` reads a role's policy once (``policy_of``, ``policies_of``) and
hands the ``RolePolicy`` (plain data) to everything it builds; the job keeps it: in local_cwd's and
slurm's records, which the local supervisor and slurm's step program read back, and as one label
(local_docker) or annotation (kubernetes) holding ``to_text``, which their views read back. The
supervisor and the step program import only the standard library, so this module does too (a torchx
``Role`` is read by its attributes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.role_metadata import spares_of as recorded_spares

APPLICATION = "APPLICATION"
"""torchx's default: a failed replica restarts every replica of the app."""
ROLE = "ROLE"
"""torchx-nightly's: a failed replica restarts every replica of its role."""
IN_PLACE = ("REPLICA", "HOT_SPARE")
"""The lost replica alone starts again (HOT_SPARE: as a new spare, while a waiting one takes its place)."""


class RoleLike(Protocol):
    """What this module reads of a torchx ``specs.Role``."""

    name: str
    num_replicas: int
    min_replicas: int | None
    max_retries: int
    retry_policy: Any
    metadata: dict[str, Any]


class AppLike(Protocol):
    @property
    def roles(self) -> Sequence[RoleLike]: ...


@dataclass(frozen=True)
class RolePolicy:
    """A role's retry policy and replica counts, as every backend reads them."""

    retry_policy: str = "REPLICA"
    """torchx's name, however the role spelled it."""
    max_retries: int = 0
    num_replicas: int = 1
    min_replicas: int = 1
    """``num_replicas`` where the role gave none."""
    has_spares: bool = False
    """``num_replicas`` minus ``min_replicas`` of the role are hot spares, not elasticity."""

    @property
    def restarts_in_place(self) -> bool:
        """A failed replica starts again alone (REPLICA, HOT_SPARE)."""
        return self.retry_policy in IN_PLACE

    @property
    def restarts_app(self) -> bool:
        """A failed replica restarts the whole app (torchx's APPLICATION, its default)."""
        return self.retry_policy == APPLICATION

    @property
    def restarts_role(self) -> bool:
        """A failed replica restarts every replica of its role (torchx-nightly's ROLE)."""
        return self.retry_policy == ROLE

    @property
    def is_elastic(self) -> bool:
        """The role's node count itself may vary between ``min_replicas`` and ``num_replicas``;
        a role with hot spares is not elastic (its extra replicas wait, they do not train)."""
        return self.min_replicas < self.num_replicas and not self.has_spares

    @property
    def carries_on_short(self) -> bool:
        """The role goes on while ``min_replicas`` of its replicas have not failed for good:
        an elastic role, or one with hot spares."""
        return self.min_replicas < self.num_replicas

    def restarts_whole_app(self, app_replicas: int) -> bool:
        """Whether the role's retries restart every replica of its app (``app_replicas`` in all):
        APPLICATION with retries, in an app of more than one replica (with one, restarting the
        replica is the same)."""
        return self.restarts_app and self.max_retries > 0 and app_replicas > 1

    def to_text(self) -> str:
        """The policy as one label or annotation value (JSON), read back by ``from_text``."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_text(text: str) -> RolePolicy | None:
        """What ``to_text`` wrote; None for anything else (a job written before the policy was kept whole)."""
        try:
            data = json.loads(text)
            known = {field.name for field in fields(RolePolicy)}
            if isinstance(data, dict) and set(data) == known:
                return RolePolicy(retry_policy=str(data["retry_policy"]), max_retries=int(data["max_retries"]),
                                  num_replicas=int(data["num_replicas"]), min_replicas=int(data["min_replicas"]),
                                  has_spares=bool(data["has_spares"]))
        except (ValueError, TypeError):
            pass
        return None


def policies_of(app: AppLike) -> dict[str, RolePolicy]:
    """Each role's policy, by role name: what a backend's ``build_request`` decides once and hands
    to the builders it calls."""
    return {role.name: policy_of(role) for role in app.roles}


def app_replicas(app: AppLike) -> int:
    return sum(int(role.num_replicas) for role in app.roles)


def retry_policy_of(role: RoleLike) -> str:
    """``REPLICA``, ``APPLICATION``, ``HOT_SPARE`` or ``ROLE``, whether the role holds the enum or its name."""
    return str(getattr(role.retry_policy, "value", role.retry_policy))


def min_replicas_of(role: RoleLike) -> int:
    return int(role.min_replicas) if role.min_replicas is not None else int(role.num_replicas)


def has_spares(role: RoleLike) -> bool:
    """torchx's HOT_SPARE, or the spares ``dist.*`` recorded (``role_metadata.SPARES_KEY``)."""
    return retry_policy_of(role) == "HOT_SPARE" or recorded_spares(role.metadata or {}) > 0


def check_replica_counts(role: RoleLike) -> None:
    """InvalidArgumentError unless ``min_replicas`` is within 1..``num_replicas``."""
    if not 1 <= min_replicas_of(role) <= role.num_replicas:
        raise InvalidArgumentError(
            f"role {role.name!r}: min_replicas {role.min_replicas} is not within 1..{role.num_replicas} (num_replicas)")


def policy_of(role: RoleLike) -> RolePolicy:
    return RolePolicy(retry_policy=retry_policy_of(role), max_retries=int(role.max_retries),
                      num_replicas=int(role.num_replicas), min_replicas=min_replicas_of(role),
                      has_spares=has_spares(role))


def format_1_role(role: Mapping[str, Any]) -> dict[str, Any]:
    """A role of a job record written before the policy was kept apart (local_cwd's and slurm's
    format 1), as a role of today: its numbers, at the role and in its spec, become its
    ``policy``. A job submitted before an upgrade is still read, and still run (slurm's step
    program reads its request on every node)."""
    kept = {key: value for key, value in role.items()
            if key not in ("max_retries", "min_replicas", "num_replicas", "retry_policy")}
    return {**kept, "policy": _policy_of_format_1(role)}


def _policy_of_format_1(role: Mapping[str, Any]) -> RolePolicy:
    spec = role.get("spec") or {}
    replicas = role.get("num_replicas") or spec.get("num_replicas") or len(role.get("replicas") or []) or 1
    least = role.get("min_replicas")
    return RolePolicy(retry_policy=str(role.get("retry_policy") or spec.get("retry_policy") or "REPLICA"),
                      max_retries=int(role.get("max_retries", spec.get("max_retries", 0))),
                      num_replicas=int(replicas), min_replicas=int(replicas if least is None else least),
                      has_spares=bool(spec.get("hot_spares")))

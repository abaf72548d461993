"""What a role's spec means to every backend (schedulers/common/role_policy.py), from torchx Roles."""

from __future__ import annotations

import pytest
from torchx import specs

from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.common.role_policy import RolePolicy, app_replicas, policy_of, policies_of

POLICIES = [policy for policy in ("REPLICA", "APPLICATION", "HOT_SPARE", "ROLE") if policy in specs.RetryPolicy.__members__]


def _role(policy: str = "APPLICATION", replicas: int = 2, least: int | None = None, retries: int = 1) -> specs.Role:
    return specs.Role(name="r", image="i", entrypoint="e", num_replicas=replicas, min_replicas=least,
                      max_retries=retries, retry_policy=specs.RetryPolicy(policy))


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_of_the_installed_torchx_restarts_exactly_one_thing(name: str) -> None:
    policy = policy_of(_role(name))
    assert [policy.restarts_in_place, policy.restarts_app, policy.restarts_role].count(True) == 1


def test_a_min_below_num_is_elastic_unless_the_extra_replicas_are_hot_spares() -> None:
    elastic = policy_of(ddp(script="t.py", j="1:3x1").roles[0])
    spares = policy_of(ddp(script="t.py", j="2x1", spares=1).roles[0])
    fixed = policy_of(ddp(script="t.py", j="2x1").roles[0])

    assert (elastic.is_elastic, elastic.carries_on_short, elastic.min_replicas) == (True, True, 1)
    assert (spares.is_elastic, spares.carries_on_short, spares.has_spares, spares.min_replicas) == (False, True, True, 2)
    assert (fixed.is_elastic, fixed.carries_on_short, fixed.min_replicas) == (False, False, 2)


def test_application_restarts_the_whole_app_only_with_retries_and_more_than_one_replica() -> None:
    def whole(*roles: specs.Role) -> bool:
        app = specs.AppDef(name="a", roles=list(roles))
        return policy_of(roles[-1]).restarts_whole_app(app_replicas(app))

    assert whole(_role())
    assert not whole(_role(replicas=1))
    assert whole(_role(replicas=1), _role(replicas=1))
    assert not whole(_role(retries=0))
    assert not whole(_role("REPLICA"))


@pytest.mark.parametrize("name", POLICIES)
def test_a_policy_written_as_one_label_reads_back_the_same_and_anything_else_reads_as_none(name: str) -> None:
    app = ddp(script="t.py", j="1:3x1")
    for policy in [policy_of(_role(name, least=1)), *policies_of(app).values()]:
        text = policy.to_text()
        assert RolePolicy.from_text(text) == policy, text
    for other in ["", "2", "{}", '{"retry_policy": "REPLICA"}', "[1]", "not json"]:
        assert RolePolicy.from_text(other) is None, other

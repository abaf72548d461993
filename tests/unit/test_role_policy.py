"""What a role's spec means to every backend (schedulers/common/role_policy.py), from torchx Roles."""

from __future__ import annotations

import pytest
from torchx import specs

from torchx_ext.components.dist import ddp
from torchx_ext.schedulers.common.role_policy import policy_of, restarts_whole_app

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
    def app(*roles: specs.Role) -> specs.AppDef:
        return specs.AppDef(name="a", roles=list(roles))

    assert restarts_whole_app(app(_role()), _role())
    assert not restarts_whole_app(app(_role(replicas=1)), _role(replicas=1))
    assert restarts_whole_app(app(_role(replicas=1), _role(replicas=1)), _role(replicas=1))
    assert not restarts_whole_app(app(_role(retries=0)), _role(retries=0))
    assert not restarts_whole_app(app(_role("REPLICA")), _role("REPLICA"))

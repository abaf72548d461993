"""torchx_ext's named resources (``-h``) for torchx-nightly's plugin registry, which adds them
to torchx's own (torchx 0.7.0 reads them from entry points: ``torchx_ext.registration``)."""

from __future__ import annotations

from collections.abc import Callable

from torchx.plugins import register
from torchx.specs import Resource

from torchx_ext.resources import HOSTS


def _factory(name: str) -> Callable[[], Resource]:
    def resource() -> Resource:
        return HOSTS[name].resource()

    return resource


# register() names each factory after its host (names with dots, e.g. aws_p5.48xlarge) and
# puts it in this module, where torchx's scanner finds it.
for _name in HOSTS:
    register.named_resource(name=_name)(_factory(_name))

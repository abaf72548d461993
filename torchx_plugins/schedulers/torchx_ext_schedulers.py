"""torchx_ext's schedulers for torchx-nightly, which finds plugins in ``torchx_plugins.*``
modules and adds them to its builtins (torchx 0.7.0 reads ``torchx_ext/registration/
torchx_0_7_0/entry_points.txt`` instead; ``torchx_ext.registration`` says why).

torchx imports this module whenever it lists schedulers (every ``torchx run``): the
scheduler's own modules are imported only when torchx creates it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchx.plugins import register

if TYPE_CHECKING:
    from torchx.schedulers.api import Scheduler


@register.scheduler()
def local_cwd(session_name: str, **kwargs: object) -> Scheduler:
    from torchx_ext.schedulers.local import create_scheduler

    return create_scheduler(session_name, **kwargs)


@register.scheduler()
def local_docker(session_name: str, **kwargs: object) -> Scheduler:
    from torchx_ext.schedulers.docker import create_scheduler

    return create_scheduler(session_name, **kwargs)


@register.scheduler()
def kubernetes(session_name: str, **kwargs: object) -> Scheduler:
    from torchx_ext.schedulers.kubernetes import create_scheduler

    return create_scheduler(session_name, **kwargs)

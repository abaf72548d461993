"""torchx_ext's schedulers for torchx-nightly, which finds plugins in ``torchx_plugins.*``
modules and adds them to its builtins (torchx 0.7.0 reads ``torchx_ext/registration/
torchx_0_7_0/entry_points.txt`` instead; ``torchx_ext.registration`` says why).

torchx imports this module whenever it lists schedulers (every ``torchx run``): the
scheduler's own modules are imported only when torchx creates it. torchx takes a module's
plugins in the order of their attribute names (``dir()``) and the first scheduler is the
default of ``torchx run``: the functions are numbered so that local_cwd comes first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchx.plugins import register

if TYPE_CHECKING:
    from torchx.schedulers.api import Scheduler


@register.scheduler(name="local_cwd")
def scheduler_1_local_cwd(session_name: str, **kwargs: object) -> Scheduler:
    from torchx_ext.schedulers.local import create_scheduler

    return create_scheduler(session_name, **kwargs)


@register.scheduler(name="local_docker")
def scheduler_2_local_docker(session_name: str, **kwargs: object) -> Scheduler:
    from torchx_ext.schedulers.docker import create_scheduler

    return create_scheduler(session_name, **kwargs)


@register.scheduler(name="kubernetes")
def scheduler_3_kubernetes(session_name: str, **kwargs: object) -> Scheduler:
    from torchx_ext.schedulers.kubernetes import create_scheduler

    return create_scheduler(session_name, **kwargs)


@register.scheduler(name="slurm")
def scheduler_4_slurm(session_name: str, **kwargs: object) -> Scheduler:
    from torchx_ext.schedulers.slurm import create_scheduler

    return create_scheduler(session_name, **kwargs)

"""torchx_ext's schedulers for torchx-nightly, which finds plugins in ``torchx_plugins.*``
modules and adds them to its builtins (torchx 0.7.0 reads ``torchx_ext/registration/
torchx_0_7_0/entry_points.txt`` instead; ``torchx_ext.registration`` says why). One plugin per
backend of ``torchx_ext/schedulers/backends.py``.

torchx imports this module whenever it lists schedulers (every ``torchx run``): the
scheduler's own modules are imported only when torchx creates it. torchx takes a module's
plugins in the order of their attribute names (``dir()``) and the first scheduler is the
default of ``torchx run``: the functions are numbered in the list's order, local_cwd first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from torchx.plugins import register

from torchx_ext.schedulers.backends import BACKENDS, Backend

if TYPE_CHECKING:
    from torchx.schedulers.api import Scheduler


def _plugin(position: int, backend: Backend) -> Callable[..., Scheduler]:
    def create(session_name: str, **kwargs: object) -> Scheduler:
        module = importlib.import_module(backend.module)
        return module.create_scheduler(session_name, **kwargs)

    create.__name__ = create.__qualname__ = _name(position, backend)
    return register.scheduler(name=backend.scheduler)(create)  # type: ignore[no-any-return]


def _name(position: int, backend: Backend) -> str:
    return f"scheduler_{position:02d}_{backend.scheduler}"


for _position, _backend in enumerate(BACKENDS, 1):
    globals()[_name(_position, _backend)] = _plugin(_position, _backend)

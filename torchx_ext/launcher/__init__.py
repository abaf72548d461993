"""The bundled launcher: torchrun's flags and meaning on torch.distributed.elastic, plus NUMA binding.

Command line: ``python -m torchx_ext.launcher`` or ``torchx-ext-run``. Python API:
``torchx_ext.launcher.launch(fn, *args, nproc_per_node=..., numa_binding=...)``, which raises
``WorkerFailedError`` (from ``torchx_ext.errors``) for a failed worker.
Importing this package imports neither torch nor typing (every worker imports it);
``launch`` is loaded on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from torchx_ext.errors import WorkerFailedError
    from torchx_ext.launcher.api import launch

__all__ = ["launch", "WorkerFailedError"]


def __getattr__(name: str) -> object:
    if name == "launch":
        from torchx_ext.launcher.api import launch

        return launch
    if name == "WorkerFailedError":
        from torchx_ext.errors import WorkerFailedError

        return WorkerFailedError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

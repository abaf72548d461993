"""Worker side: apply this rank's binding, then become the user's program. No torch import.

Script and module workers run as

    python -u -c "from torchx_ext.launcher.bootstrap import main; main()" PLAN LOCAL_RANK KIND TARGET ARGS...

so the CPU affinity is set by the worker's first Python statement, before the user's
imports start any thread (every thread inherits it), without numactl and without a second
interpreter. KIND is ``script`` or ``module`` (run in this interpreter, as ``python`` would)
or ``exec`` (``--no-python``: replace this process). Callables are wrapped in
``BoundCallable``, which binds before the callable, and the module defining it, are loaded.
"""

from __future__ import annotations

import os
import pickle
import runpy
import sys
from collections.abc import Callable
from typing import Any

from torchx_ext.launcher.worker_binding import WorkerBinding, decode
from torchx_ext.numa.bind import bind_process
from torchx_ext.numa.cpulist import parse_cpulist

BOOTSTRAP_CODE = "from torchx_ext.launcher.bootstrap import main; main()"
CPUS_ENV = "TORCHX_EXT_CPUS"
NUMA_NODE_ENV = "TORCHX_EXT_NUMA_NODE"


def apply(binding: WorkerBinding) -> None:
    """Bind this process and describe the binding in its environment (inherited by children)."""
    if binding.cpus is not None:
        bind_process(parse_cpulist(binding.cpus))
        os.environ[CPUS_ENV] = binding.cpus
        os.environ[NUMA_NODE_ENV] = "" if binding.numa_node is None else str(binding.numa_node)
    if binding.omp_threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(binding.omp_threads)
        torch = sys.modules.get("torch")
        if torch is not None:  # already loaded, so it read the variable too early
            torch.set_num_threads(binding.omp_threads)


def main() -> None:
    plan, local_rank, kind, target, *args = sys.argv[1:]
    apply(decode(plan)[int(local_rank)])
    if kind == "exec":
        os.execvp(target, [target, *args])
    if kind == "module":
        sys.argv = [target, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


def run_script_path(script: str, *args: str) -> None:
    """``--run-path``: run a script inside the worker's interpreter, as torchrun does."""
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


class BoundCallable:
    """A worker entrypoint that applies its rank's binding, then loads and calls ``fn``.

    For spawn and forkserver, ``fn`` and its arguments travel pickled and are unpickled
    only after binding, so the module defining ``fn`` is imported on the rank's CPUs. Under
    fork nothing is pickled and they are kept as they are.
    """

    def __init__(
        self, plan: str, fn: Callable[..., Any], args: tuple[Any, ...], *, pickled: bool
    ) -> None:
        self.plan = plan
        # torchelastic names the run and its events after the entrypoint's names.
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.payload: bytes | None = None
        self.call: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
        if pickled:
            from multiprocessing.reduction import ForkingPickler

            self.payload = bytes(ForkingPickler.dumps((fn, args)))
        else:
            self.call = (fn, args)

    def __call__(self, local_rank: str) -> Any:
        apply(decode(self.plan)[int(local_rank)])
        fn, args = self.call if self.call is not None else pickle.loads(self.payload or b"")
        return fn(*args)

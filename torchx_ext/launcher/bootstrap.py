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
import sys

from torchx_ext.ft import LIGHTHOUSE_ENV  # constants only

# Every worker imports this module before the user's code, so it imports next to nothing
# (no typing, json, dataclasses, logging, runpy, nor the rest of torchx_ext): those imports
# would cost more than the binding itself.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

BOOTSTRAP_CODE = "from torchx_ext.launcher.bootstrap import main; main()"
CPUS_ENV = "TORCHX_EXT_CPUS"
LAUNCHER_PID_ENV = "TORCHX_EXT_LAUNCHER_PID"
NUMA_NODE_ENV = "TORCHX_EXT_NUMA_NODE"
PROGRESS_DIR_ENV = "TORCHX_EXT_PROGRESS_DIR"
"""Where a worker reports its progress for the hang watchdog (worker_progress.py); unset: off."""
LAUNCHER_SET_ENV = (PROGRESS_DIR_ENV, LIGHTHOUSE_ENV)
"""What the launcher sets for its workers after its forkserver of preloaded workers started: carried to them."""
SERVED_TIMER_ENV = "TORCHX_EXT_FILE_TIMER"
"""Set while the launcher serves torch's file timer itself (step_timer.py): its workers get
``TORCHELASTIC_ENABLE_FILE_TIMER=1`` back, which the launcher hid from its agent."""


class WorkerBinding:
    """One local rank's instructions; ``cpus`` (a cpulist) is None when nothing is applied."""

    __slots__ = ("cpus", "numa_node", "omp_threads")

    def __init__(self, cpus: str | None, numa_node: int | None, omp_threads: int | None) -> None:
        self.cpus = cpus
        self.numa_node = numa_node
        self.omp_threads = omp_threads

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkerBinding) and self.fields() == other.fields()

    def __repr__(self) -> str:
        return f"WorkerBinding(cpus={self.cpus!r}, numa_node={self.numa_node!r}, omp_threads={self.omp_threads!r})"

    def fields(self) -> tuple[str | None, int | None, int | None]:
        return (self.cpus, self.numa_node, self.omp_threads)


def encode_plan(bindings: list[WorkerBinding]) -> str:
    """``CPUS|NODE|OMP`` per rank, ``;``-separated, ``-`` for none: no ``$``, so torchelastic's
    ``${local_rank}`` substitution of worker arguments leaves it intact."""
    return ";".join(
        "|".join("-" if value is None else str(value) for value in binding.fields()) for binding in bindings
    )


def decode_plan(text: str) -> list[WorkerBinding]:
    bindings = []
    for entry in text.split(";"):
        cpus, node, omp = entry.split("|")
        bindings.append(
            WorkerBinding(
                None if cpus == "-" else cpus,
                None if node == "-" else int(node),
                None if omp == "-" else int(omp),
            )
        )
    return bindings


def apply(binding: WorkerBinding) -> None:
    """Bind this process and describe the binding in its environment (inherited by children)."""
    if binding.cpus is not None:
        cpus = _cpus_of(binding.cpus)
        if len(os.listdir("/proc/self/task")) == 1:
            os.sched_setaffinity(0, cpus)  # the usual case: nothing has started a thread yet
        else:
            from torchx_ext.numa.bind import bind_process

            bind_process(cpus)
        os.environ[CPUS_ENV] = binding.cpus
        os.environ[NUMA_NODE_ENV] = "" if binding.numa_node is None else str(binding.numa_node)
    if binding.omp_threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(binding.omp_threads)
    from torchx_ext.launcher.rendezvous.loopback import is_loopback, keep_sockets_on_loopback

    if is_loopback(os.environ.get("MASTER_ADDR", "")):
        # A job on this host alone: its rank 0's store is on loopback, and so are gloo and NCCL.
        keep_sockets_on_loopback()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    torch = sys.modules.get("torch")
    if torch is not None and threads.isdecimal() and int(threads) > 0:
        # Loaded already (a preloaded worker), so it read the variable before it was set.
        torch.set_num_threads(int(threads))


def die_with_launcher(pid: int | None) -> None:
    """End this worker the moment the launcher ``pid`` ends, however it ends.

    torchelastic stops its workers when the launcher is stopped by a signal it can catch; a
    SIGKILL (the OOM killer, ``kill -9``) or a lost store ends it at once and would leave them
    running, holding their CPUs and GPUs. Preloaded workers are the forkserver's children, so
    the kernel's parent-death signal cannot name the launcher: a pidfd can, on Linux 5.3 and
    newer (without one, workers outlive a killed launcher as torchrun's do).
    """
    if not pid:
        return
    import select
    import signal
    import threading

    try:
        launcher = os.pidfd_open(pid)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)  # it is gone already
        return
    except (AttributeError, OSError):
        return

    def wait_for_launcher() -> None:
        select.select([launcher], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait_for_launcher, name="torchx_ext: die with the launcher", daemon=True).start()


def _die_with_parent_after_exec() -> None:
    # An exec'd worker (--no-python) keeps no thread: the parent-death signal survives exec,
    # and the launcher is its parent (torchelastic starts such workers from its main thread).
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (AttributeError, OSError):
        return
    if str(os.getppid()) != os.environ.get(LAUNCHER_PID_ENV, str(os.getppid())):
        os.kill(os.getpid(), signal.SIGKILL)  # the launcher ended before the signal was set


def set_title(kind: str, target: str, args: Sequence[str]) -> None:
    """Name the worker in ``ps`` and ``top`` by what it runs and its rank, rather than by our
    bootstrap's ``-c`` code or multiprocessing's forkserver."""
    try:
        from setproctitle import setproctitle
    except ImportError:  # a title is a convenience: a worker runs without one
        return
    command = ["python", "-m", target] if kind == "module" else ["python", target]
    rank = f"(torchx_ext rank {os.environ.get('RANK', '?')}, local rank {os.environ.get('LOCAL_RANK', '?')})"
    # Without SPT_NOENV the title would also overwrite the environment block that
    # /proc/PID/environ shows, where schedulers find their markers (local_cwd's job marker).
    os.environ["SPT_NOENV"] = "1"
    try:
        setproctitle(" ".join([*command, *args, rank]))
    finally:
        del os.environ["SPT_NOENV"]


def _restore_timer_env() -> None:
    if os.environ.get(SERVED_TIMER_ENV):
        os.environ["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1"


def _report_progress() -> None:
    _restore_timer_env()
    directory = os.environ.get(PROGRESS_DIR_ENV)
    if directory:  # else not even imported: nobody watches
        from torchx_ext.launcher.worker_progress import report_progress

        report_progress(directory)


class _FailureKept:
    """Around the user's code: an error, or an exit code other than 0, is left in the progress
    directory (``worker_progress.mark_failed``) before it goes on as it would, so the launcher can
    tell an attempt that failed from one whose workers it stopped. A signal's end leaves nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: object) -> None:
        directory = os.environ.get(PROGRESS_DIR_ENV)
        if error is None or not directory or isinstance(error, KeyboardInterrupt):
            return
        if isinstance(error, SystemExit) and error.code in (None, 0):
            return
        from torchx_ext.launcher.worker_progress import mark_failed

        mark_failed(directory, error)


def _cpus_of(cpulist: str) -> set[int]:
    # Only encode_plan writes these (plain ranges from format_cpulist), so the full parser in
    # torchx_ext.numa.cpulist is not needed here.
    cpus: set[int] = set()
    for chunk in cpulist.split(","):
        first, _, last = chunk.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def main() -> None:
    plan, local_rank, kind, target, *args = sys.argv[1:]
    apply(decode_plan(plan)[int(local_rank)])
    if kind == "exec":
        _restore_timer_env()  # a program of its own reports no progress, but sees the variables
        _die_with_parent_after_exec()
        os.execvp(target, [target, *args])
    die_with_launcher(int(os.environ.get(LAUNCHER_PID_ENV) or 0))
    _report_progress()
    set_title(kind, target, args)
    sys.argv = [target, *args]
    with _FailureKept():
        if kind == "module":
            import runpy  # as ``python -m`` itself does

            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            # As python does: the script's real directory first on the path, __file__ absolute.
            sys.path[0] = os.path.dirname(os.path.realpath(target))
            _run_as_main(target)


def _run_as_main(script: str) -> None:
    """Run ``script`` as ``python script`` does: in ``__main__``, with ``__file__`` set.

    Not runpy.run_path: importing runpy (and pkgutil) would cost more than the binding.
    """
    namespace = sys.modules["__main__"].__dict__
    namespace.pop("main", None)  # the name our ``-c`` line imported
    namespace.update(
        __name__="__main__", __file__=os.path.abspath(script), __cached__=None, __spec__=None, __package__=None
    )
    with open(script, "rb") as source:
        code = compile(source.read(), script, "exec", dont_inherit=True)
    exec(code, namespace)


def run_preloaded(kind: str, target: str, *args: str) -> None:
    """The worker of a preloaded start: run the script or module as ``python -u`` would.

    This process was forked from a server that imported torch while the launcher started,
    so the user's ``import torch`` is already done. What ``python`` does and a fork skips is
    done here: the script gets a fresh ``__main__``, and its ``atexit`` handlers run and its
    globals are released (closing the files they hold) before the process ends.
    """
    import atexit
    import types

    _unbuffer_stdio()
    set_title(kind, target, args)
    sys.argv = [target, *args]
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    try:
        # Kept here, not only around this function: the failure is told before the exit handlers
        # run, which may take long (a checkpoint flushed, data-loader processes joined).
        with _FailureKept():
            if kind == "module":
                import runpy

                sys.path[0] = os.getcwd()
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                sys.path[0] = os.path.dirname(os.path.realpath(target))
                main_module.__dict__.update(__file__=os.path.abspath(target), __cached__=None)
                with open(target, "rb") as source:
                    code = compile(source.read(), target, "exec", dont_inherit=True)
                exec(code, main_module.__dict__)
    finally:
        atexit._run_exitfuncs()
        main_module.__dict__.clear()
        sys.stdout.flush()
        sys.stderr.flush()


def _unbuffer_stdio() -> None:
    # As ``python -u``: every write reaches the file (the launcher tails it) at once.
    import io

    for name, descriptor in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        raw = open(descriptor, "wb", buffering=0, closefd=False)
        setattr(sys, name, io.TextIOWrapper(raw, encoding=stream.encoding, errors=stream.errors, write_through=True))


def run_script_path(script: str, *args: str) -> None:
    """``--run-path``: run a script inside the worker's interpreter, as torchrun does."""
    import runpy

    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


class BoundCallable:
    """A worker entrypoint that applies its rank's binding, then loads and calls ``fn``.

    For spawn and forkserver, ``fn`` and its arguments travel pickled and are unpickled
    only after binding, so a module defining ``fn`` is imported on the rank's CPUs. Under
    fork nothing is pickled and they are kept as they are.

    Under spawn a child re-imports the parent's ``__main__`` before it unpickles anything,
    so ``bind_spawn_parent`` also binds the starting thread while each child is created (the
    parent-inherits trick): torch starts spawn children one by one from one thread, pickling
    this object once per child, in local-rank order, just before creating it. The caller
    restores that thread's CPUs afterwards. Forkserver children are forked by the server,
    not by this thread, so the trick would bind them wrongly there and is not used.
    """

    def __init__(
        self,
        plan: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        pickled: bool,
        bind_spawn_parent: bool = False,
    ) -> None:
        self.plan = plan
        self.launcher_pid = os.getpid()
        # A preloaded worker's environment is its server's, made before the launcher chose these.
        self.env = {name: os.environ[name] for name in LAUNCHER_SET_ENV if name in os.environ}
        # torchelastic names the run and its events after the entrypoint's names.
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.payload: bytes | None = None
        self.call: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
        self._spawn_cpus = [binding.cpus for binding in decode_plan(plan)] if bind_spawn_parent else []
        self._children_started = 0
        if pickled:
            from multiprocessing.reduction import ForkingPickler

            self.payload = bytes(ForkingPickler.dumps((fn, args)))
        else:
            self.call = (fn, args)

    def __reduce__(self) -> tuple[Callable[..., BoundCallable], tuple[Any, ...]]:
        if self._spawn_cpus:
            cpus = self._spawn_cpus[self._children_started % len(self._spawn_cpus)]
            self._children_started += 1
            if cpus is not None:
                os.sched_setaffinity(0, _cpus_of(cpus))  # the child about to be spawned inherits it
        return (_rebuild_bound_callable,
                (self.plan, self.launcher_pid, self.env, self.__name__, self.__qualname__, self.payload))

    def __call__(self, local_rank: str) -> Any:
        server = sys.modules.get("torchx_ext.launcher.preload_server")
        if server is not None and server.ignores_sigterm:
            import signal

            # Forked by our server, which ignores SIGTERM: a worker takes it as any process does.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        apply(decode_plan(self.plan)[int(local_rank)])
        die_with_launcher(self.launcher_pid)
        os.environ.update(self.env)
        _report_progress()
        if self.call is None:
            import pickle

            fn, args = pickle.loads(self.payload or b"")
        else:
            fn, args = self.call
        with _FailureKept():
            return fn(*args)


def _rebuild_bound_callable(plan: str, launcher_pid: int, env: dict[str, str], name: str, qualname: str,
                            payload: bytes | None) -> BoundCallable:
    bound = BoundCallable.__new__(BoundCallable)
    bound.plan, bound.launcher_pid, bound.__name__, bound.__qualname__ = plan, launcher_pid, name, qualname
    bound.env = env
    bound.payload, bound.call = payload, None
    bound._spawn_cpus, bound._children_started = [], 0
    return bound

"""The only module that changes CPU affinity. Uses sched_setaffinity directly: no numactl.

``sched_setaffinity(0, ...)`` acts on the calling thread only, and a new thread or process
inherits the affinity of the thread that creates it. ``bound_thread`` builds on that: the
thread that starts a worker takes the worker's CPUs for the duration of the start, so the
worker runs on them from its first instruction, and workers started in parallel from
different threads do not disturb each other.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from torchx_ext.errors import BindingError
from torchx_ext.numa.cpulist import format_cpulist

_CALLING_THREAD = 0


def current_affinity() -> frozenset[int]:
    """The CPUs the calling thread may run on."""
    return frozenset(os.sched_getaffinity(_CALLING_THREAD))


def bind_thread(cpus: Iterable[int]) -> None:
    """Restrict the calling thread (and whatever it starts afterwards) to ``cpus``."""
    _set(_CALLING_THREAD, frozenset(cpus))


def bind_process(cpus: Iterable[int]) -> None:
    """Restrict every thread of the current process to ``cpus``.

    Threads started by imported libraries (OpenMP pools, loaders) were created with the old
    mask, so each one is set explicitly; threads that exit meanwhile are skipped.
    """
    target = frozenset(cpus)
    _set(_CALLING_THREAD, target)
    for name in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(name), target)
        except (ProcessLookupError, FileNotFoundError):
            continue
        except OSError as error:
            raise _refused(target, error) from error


@contextmanager
def bound_thread(cpus: Iterable[int]) -> Iterator[frozenset[int]]:
    """Bind the calling thread to ``cpus`` inside the block, then restore its old CPUs.

    Processes and threads started inside the block inherit ``cpus``.
    """
    previous = current_affinity()
    target = frozenset(cpus)
    _set(_CALLING_THREAD, target)
    try:
        yield target
    finally:
        os.sched_setaffinity(_CALLING_THREAD, previous)


def _set(thread: int, cpus: frozenset[int]) -> None:
    if not cpus:
        raise BindingError("cannot bind to an empty set of CPUs: give at least one CPU")
    try:
        os.sched_setaffinity(thread, cpus)
    except OSError as error:
        raise _refused(cpus, error) from error


def _refused(cpus: frozenset[int], error: OSError) -> BindingError:
    return BindingError(
        f"the kernel refused CPUs {format_cpulist(cpus)} ({error.strerror}); this process may "
        f"use {format_cpulist(current_affinity())} (its affinity and cgroup cpuset)"
    )

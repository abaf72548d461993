"""Real CPU affinity on this machine (which has at least two CPUs in CI)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from torchx_ext.errors import BindingError
from torchx_ext.numa.bind import bind_thread, bound_thread, current_affinity

REPORT_AFFINITY = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]


def test_bind_thread_changes_only_the_calling_thread(two_cpus: list[int]) -> None:
    before = current_affinity()
    seen: list[frozenset[int]] = []

    def worker() -> None:
        bind_thread({two_cpus[-1]})
        seen.append(current_affinity())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [frozenset({two_cpus[-1]})]
    assert current_affinity() == before


def test_children_started_inside_bound_thread_inherit_its_cpus(two_cpus: list[int]) -> None:
    before = current_affinity()
    with bound_thread({two_cpus[-1]}):
        child = subprocess.run(REPORT_AFFINITY, capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str([two_cpus[-1]])
    assert current_affinity() == before


def test_parallel_starts_from_several_threads_each_get_their_own_cpus(two_cpus: list[int]) -> None:
    barrier = threading.Barrier(2)
    reports: dict[int, str] = {}

    def start(cpu: int) -> None:
        with bound_thread({cpu}):
            barrier.wait()  # both threads are bound before either starts its child
            reports[cpu] = subprocess.run(REPORT_AFFINITY, capture_output=True, text=True, check=True).stdout.strip()
            barrier.wait()

    threads = [threading.Thread(target=start, args=(cpu,)) for cpu in (two_cpus[0], two_cpus[-1])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reports == {two_cpus[0]: str([two_cpus[0]]), two_cpus[-1]: str([two_cpus[-1]])}


def test_bind_process_binds_threads_that_already_run(two_cpus: list[int]) -> None:
    script = textwrap.dedent(
        f"""
        import os, threading
        from torchx_ext.numa.bind import bind_process
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(3)]
        for thread in threads:
            thread.start()
        bind_process({{{two_cpus[-1]}}})
        print(sorted({{frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}}, key=sorted))
        stop.set()
        """
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == f"[frozenset({{{two_cpus[-1]}}})]"


def test_binding_to_no_cpu_or_a_cpu_outside_the_affinity_is_refused(two_cpus: list[int]) -> None:
    before = current_affinity()
    with pytest.raises(BindingError, match="empty set of CPUs"):
        bind_thread(set())
    with pytest.raises(BindingError, match=r"refused CPUs 4095 .*this process may use"):
        with bound_thread({4095}):
            pass
    assert current_affinity() == before

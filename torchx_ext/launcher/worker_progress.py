"""Worker side of the hang watchdog: is this rank's main thread moving, and where is it now.

A rank that hangs (a deadlock, a data loader that never returns, a collective its peers never
join) stays alive: nothing exits, so nothing else notices. Where the launcher names a directory
(``bootstrap.PROGRESS_DIR_ENV``), each Python worker, before the user's code starts:

- samples its main thread every ``SAMPLE_S`` on a thread of its own and counts the samples at which
  it moved, in ``DIR/PID.progress`` (one line, rewritten in place: ``MOVES RANK LOCAL_RANK
  MAIN_THREAD``). It moved when its Python stack changed since the sample before; or, when the
  stack looks the same, when it called or returned from anything since the last probe: the
  sampler sends ``TICK_SIGNAL`` to the main thread, whose handler (run by the interpreter only
  between bytecodes) arms a one-shot profile function, and the first call or return after the
  handler counts. A sampler sees a thread only at a few instructions, so a loop that spends its
  time in one call (``torch.mm`` over and over, a CUDA graph's replay and ``.item()``) looks the
  same at every sample, yet returns many times a second; a thread blocked in one call (a lock, a
  queue, a collective, a sleep) never returns, even when the signal interrupts its wait and the
  handler runs. A thread running Python code with no call for the interval (its CPU time grew while
  its innermost frame was not inside a call) moved too.
- leaves ``DIR/PID.failed`` (one line: the error) when the user's code raises or exits with a
  code other than 0 (``mark_failed``; the bootstrap wraps the user's code), so the launcher can
  tell an attempt that failed from one whose workers it stopped.
- registers ``faulthandler`` on ``STACK_SIGNAL``: the launcher sends it, and every thread's
  Python stack is appended to ``DIR/PID.stack`` from the signal handler itself, so a rank stuck
  in C, holding the interpreter's lock, still answers.

The agent (``hang_watch.py``) adds the counters up across the job and decides. What the stack
cannot tell: one C call longer than the hang timeout on every rank looks like a hang, and a rank
that spins in a Python loop looks like progress. A profile function of the user's own (cProfile) is
left alone: the probe is then skipped. Standard library only, imported by every worker before the
user's code (bootstrap.py): it costs one thread, two open files and, while the stack stands still,
one signal a second (system calls restart after it: ``siginterrupt`` off).
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import IO

SAMPLE_S = 1.0
BUSY_SHARE = 0.2
"""CPU time, as a share of the interval, above which a thread running Python code is moving."""
STACK_SIGNAL = signal.SIGRTMIN + 6
"""A real-time signal: no program expects it (SIGUSR1 and SIGUSR2 are Slurm's and Lightning's
preemption signals), and nobody but our launcher sends it to a worker."""
TICK_SIGNAL = signal.SIGRTMIN + 7
"""Sent by the sampler to the worker's own main thread only, while its handler is installed."""
LINE_BYTES = 80
_MAX_FRAMES = 64
_stack_file: IO[str] | None = None  # kept open for faulthandler, for the life of the process
_ticks = 0
"""Calls or returns the main thread made after a probe's handler ran (the sampler reads it)."""


def report_progress(directory: str) -> None:
    """Start reporting this worker's progress and answering for its stack into ``directory``."""
    global _stack_file
    if _stack_file is not None:
        return
    import faulthandler
    import threading

    pid = os.getpid()
    main = threading.get_ident()  # the thread that goes on to run the user's code
    rank, local_rank = os.environ.get("RANK", "-1"), os.environ.get("LOCAL_RANK", "-1")
    try:
        _stack_file = open(os.path.join(directory, f"{pid}.stack"), "a", encoding="utf-8")
        faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True)
        signal.signal(TICK_SIGNAL, _on_tick)
        signal.siginterrupt(TICK_SIGNAL, False)  # the main thread's system calls restart after a probe
        progress = os.open(os.path.join(directory, f"{pid}.progress"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except (OSError, ValueError):
        return  # a directory gone with its launcher: this worker is not watched
    threading.Thread(target=_sample, args=(progress, main, f"{rank} {local_rank} {main:#x}"),
                     name="torchx_ext: progress", daemon=True).start()


def mark_failed(directory: str, error: BaseException) -> None:
    """Leave ``DIR/PID.failed``: this worker's user code ended with ``error`` (an exception, or a
    ``SystemExit`` whose code is not 0; the bootstrap decides which), unless it left one already."""
    if isinstance(error, SystemExit):
        line = f"exited with code {error.code}"
    else:
        line = (f"{type(error).__name__}: {error}".splitlines() or [""])[0][:200]
    path = os.path.join(directory, f"{os.getpid()}.failed")
    if os.path.exists(path):
        return  # the first error is the one that counts (its time orders it against the peers')
    try:
        # Whole or not at all: the launcher's watch reads these files while the worker still runs.
        with open(f"{path}.partial", "w", encoding="utf-8") as failed:
            failed.write(f"rank {os.environ.get('RANK', '?')}: {line}")
        os.replace(f"{path}.partial", path)
    except OSError:
        pass  # a directory gone with its launcher


def _sample(descriptor: int, main: int, identity: str) -> None:
    import opcode
    import time

    calls = {code for name, code in opcode.opmap.items() if name.startswith(("CALL", "PRECALL"))}
    clock = time.pthread_getcpuclockid(main)
    moves, last, cpu, ticks = 0, None, time.clock_gettime(clock), _ticks
    while True:
        frame = sys._current_frames().get(main)
        if frame is None:
            return  # the main thread has ended: the process is ending
        now = _fingerprint(frame)
        in_a_call = _instruction(frame) in calls
        del frame
        try:
            cpu, spent = time.clock_gettime(clock), cpu
        except OSError:
            return  # the main thread has ended
        spent = cpu - spent
        if now != last or _ticks != ticks or (spent >= BUSY_SHARE * SAMPLE_S and not in_a_call):
            moves = moves + 1
            try:
                os.pwrite(descriptor, f"{moves} {identity}".ljust(LINE_BYTES - 1).encode() + b"\n", 0)
            except OSError:
                return
        if now == last and signal.getsignal(TICK_SIGNAL) is _on_tick:
            # The same stack again: does it return from anything before the next sample?
            try:
                signal.pthread_kill(main, TICK_SIGNAL)
            except (OSError, ValueError):
                return  # the main thread has ended
        last, ticks = now, _ticks
        time.sleep(SAMPLE_S)


def _on_tick(signum: int, frame: FrameType | None) -> None:
    """The probe's handler, in the main thread: count the next call or return made after it."""
    if sys.getprofile() is None:
        sys.setprofile(_profiled)


def _profiled(frame: FrameType, event: str, arg: object) -> None:
    global _ticks
    if frame.f_code is _on_tick.__code__:
        return  # the handler's own return: it says nothing of the thread it interrupted
    _ticks += 1
    sys.setprofile(None)


def _instruction(frame: FrameType) -> int:
    code = frame.f_code.co_code
    return code[frame.f_lasti] if 0 <= frame.f_lasti < len(code) else -1


def _fingerprint(frame: FrameType | None) -> tuple[tuple[int, int], ...]:
    """Where the thread is: each frame's code and instruction, innermost first."""
    where: list[tuple[int, int]] = []
    while frame is not None and len(where) < _MAX_FRAMES:
        where.append((id(frame.f_code), frame.f_lasti))
        frame = frame.f_back
    return tuple(where)

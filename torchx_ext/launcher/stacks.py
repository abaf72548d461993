"""Every local rank's stack, in this replica's log, asked of the workers and bounded in time.

Each Python worker answers ``STACK_SIGNAL`` with every thread's Python stack (``faulthandler``,
registered by ``worker_progress.py``), written from the signal handler into its ``PID.stack``
file; where ``py-spy`` is installed its native frames are added. A worker that does not answer
within ``STACK_BOUND_S`` (stopped, or stuck in the kernel) is named, not waited for. The block
goes to this launcher's stderr, which is the replica's log, between a first line that says why
(``STACKS_BEGIN``) and ``STACKS_END``: ``torchx stacks`` finds it there.
``torchx stacks`` asks a running launcher for the block by ``REQUEST_SIGNAL`` (``stack_request.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from types import FrameType

from torchx_ext.launcher.worker_progress import STACK_SIGNAL
from torchx_ext.stack_request import ASKED, REQUEST_SIGNAL, STACKS_BEGIN, STACKS_END

STACK_BOUND_S = 3.0
NATIVE_LINE_CHARS = 240
_answering: list[str] = []  # the launch's progress directory and this launcher's pid, while it answers requests
_POLL_S = 0.05
_THREAD_LINE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")


@dataclass(frozen=True)
class LocalRank:
    """A live worker of this launcher, as its progress file says."""

    pid: int
    rank: int
    local_rank: int
    main_thread: int
    moves: int


def local_ranks(directory: str) -> list[LocalRank]:
    """The live workers that report to ``directory``, by rank."""
    found = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if not name.endswith(".progress") or not name[: -len(".progress")].isdigit():
            continue
        pid = int(name[: -len(".progress")])
        if not _alive(pid):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as progress:
                moves, rank, local_rank, main = progress.read().split()[:4]
            found.append(LocalRank(pid, int(rank), int(local_rank), int(main, 16), int(moves)))
        except (OSError, ValueError):
            continue  # being written for the first time
    return sorted(found, key=lambda each: (each.rank, each.local_rank, each.pid))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def collect_stacks(directory: str, ranks: list[LocalRank], bound_s: float = STACK_BOUND_S) -> dict[int, str | None]:
    """Each rank's answer (every thread's stack), by pid; None for one that did not answer in time."""
    before: dict[int, int] = {}
    for rank in ranks:
        if not _catches(rank.pid, STACK_SIGNAL):
            continue  # not our worker any more (its pid reused, or it exec'd): the signal would end it
        before[rank.pid] = _size(_stack_path(directory, rank.pid))
        try:
            os.kill(rank.pid, STACK_SIGNAL)
        except ProcessLookupError:
            before.pop(rank.pid)
    answers: dict[int, str | None] = {rank.pid: None for rank in ranks}
    seen = dict(before)
    deadline = time.monotonic() + bound_s
    pending = set(before)
    while pending and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        for pid in list(pending):
            size = _size(_stack_path(directory, pid))
            if size > before[pid] and size == seen[pid]:  # written, and nothing more since the last look
                answers[pid] = _read_from(_stack_path(directory, pid), before[pid])
                pending.discard(pid)
            seen[pid] = size
    for pid in pending:  # partly written, at most
        if seen[pid] > before[pid]:
            answers[pid] = _read_from(_stack_path(directory, pid), before[pid])
    return answers


def stacks_block(why: str, directory: str, bound_s: float = STACK_BOUND_S) -> str:
    """The block this launcher writes to its log: the reason, each local rank's stack, the end line."""
    ranks = local_ranks(directory)
    answers = collect_stacks(directory, ranks, bound_s)
    lines = [f"{STACKS_BEGIN} {why}"]
    if not ranks:
        lines.append("(no Python worker of this launcher is running)")
    for rank in ranks:
        lines.append(f"--- rank {rank.rank} (local rank {rank.local_rank}, pid {rank.pid}), every thread, "
                     "most recent call first:")
        answer = answers.get(rank.pid)
        if answer is None:
            lines.append(f"(no answer within {bound_s:g} s: the process is stopped or stuck in the kernel)")
        else:
            lines.extend(_label_main_thread(answer.rstrip("\n").splitlines(), rank.main_thread))
        lines.extend(_native_frames(rank.pid, bound_s))
    lines.append(STACKS_END)
    return "\n".join(lines) + "\n"


def write_stacks(why: str, directory: str) -> None:
    """Write the block to stderr (the replica's log) in one write, so no other line splits it."""
    block = stacks_block(why, directory)
    try:
        sys.stderr.write(block)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a log that cannot be written to loses the stacks, not the decision


def _label_main_thread(lines: list[str], main_thread: int) -> list[str]:
    labelled = []
    for line in lines:
        match = _THREAD_LINE.match(line)
        if match and int(match.group(2), 16) == main_thread:
            line = f"{line[: match.end()]} (main thread){line[match.end():]}"
        labelled.append(line)
    return labelled


def _native_frames(pid: int, bound_s: float) -> list[str]:
    """py-spy's view with native frames, where it is installed (optional)."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        return []
    try:
        done = subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=bound_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return [f"(py-spy gave no answer within {bound_s:g} s)"]
    text = done.stdout if done.returncode == 0 else f"(py-spy failed: {done.stderr.strip()[:200]})"
    # A C++ frame's name can run to kilobytes (pybind11's templates): the log keeps its start.
    return ["native frames (py-spy):", *(_shortened(line) for line in text.rstrip("\n").splitlines())]


def _shortened(line: str) -> str:
    return line if len(line) <= NATIVE_LINE_CHARS else f"{line[:NATIVE_LINE_CHARS]}..."


def _stack_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.stack")


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _read_from(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as stack:
            stack.seek(offset)
            return stack.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def answer_requests() -> None:
    """Answer ``REQUEST_SIGNAL`` with a stacks block, from now on (a launcher's process; the main thread)."""
    signal.signal(REQUEST_SIGNAL, _on_request)


def answer_for(directory: str | None) -> None:
    """The progress directory whose workers a request asks (None: the launch is over)."""
    _answering[:] = [] if directory is None else [directory, str(os.getpid())]


def _on_request(signum: int, frame: FrameType | None) -> None:
    directory, pid = _answering if len(_answering) == 2 else (None, None)
    if directory is not None and pid == str(os.getpid()):  # not a worker forked with the handler  # on a thread: the agent's loop is not held up by a stuck worker
        threading.Thread(target=write_stacks, args=(ASKED, directory), name="torchx_ext: stacks", daemon=True).start()

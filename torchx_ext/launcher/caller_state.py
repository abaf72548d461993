"""What a launcher call changes in its caller's process, given back when it returns.

torchrun is a process of its own, so torch's launch code changes process state freely:
``config_from_args`` exports OMP_NUM_THREADS, ``launch_agent`` exports
TORCHELASTIC_SIGNALS_TO_HANDLE, the worker context installs handlers for SIGTERM, SIGINT,
SIGHUP and SIGQUIT that raise torch's SignalException, and we export
TORCH_DISABLE_SHARE_RDZV_TCP_STORE for restartable jobs. ``main(argv)`` and ``launch`` run
inside the caller's process, which must find its environment and its Ctrl+C as they were.

One thing a call cannot give back: a call that raised leaves its store server referenced by the
error's traceback, which the caller may keep (unittest's ``assertRaises`` does) until it becomes
garbage. A child the caller forks then inherits that garbage; collecting it there tears the server
down, which joins a thread the child does not have, and the child aborts (SIGABRT). So, once the
launcher has run in a process, its forked children never collect what they inherited
(``gc.freeze`` in each child): it was the parent's to collect.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Union

_Handler = Union[Callable[[int, Union[FrameType, None]], object], int, signal.Handlers, None]


_children_freeze = False


def children_leave_inherited_garbage() -> None:
    """From now on, a child forked from this process does not collect what it inherited."""
    global _children_freeze
    if not _children_freeze:
        os.register_at_fork(after_in_child=gc.freeze)
        _children_freeze = True


@contextmanager
def caller_state_kept() -> Iterator[None]:
    """Restore ``os.environ`` and the signal handlers on exit, however the body ends (and keep
    the call's leftovers out of the caller's forked children: ``children_leave_inherited_garbage``)."""
    children_leave_inherited_garbage()
    environ = dict(os.environ)
    handlers = _signal_handlers()
    try:
        yield
    finally:
        for name in [name for name in os.environ if name not in environ]:
            del os.environ[name]
        for name, value in environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        _restore_signal_handlers(handlers)


def _signal_handlers() -> dict[signal.Signals, _Handler]:
    if threading.current_thread() is not threading.main_thread():
        return {}  # handlers can only be installed from the main thread: nothing will change
    return {sig: signal.getsignal(sig) for sig in signal.valid_signals() if isinstance(sig, signal.Signals)}


def _restore_signal_handlers(handlers: dict[signal.Signals, _Handler]) -> None:
    for sig, handler in handlers.items():
        # None: installed outside Python, cannot be reinstalled from here (and nothing here changes it).
        if handler is not None and signal.getsignal(sig) is not handler:
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass  # SIGKILL/SIGSTOP and friends: not settable, so never changed

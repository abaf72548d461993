"""torchx's ``run``, with our components' help and input errors in the form a user expects and an
attached job's end said in one line.

What changes from torchx's own ``run`` (on both torchx lines):

- an input error of our components or schedulers is one ``torchx: error:`` line, exit 2
  (``TORCHX_EXT_DEBUG=1`` shows the traceback instead);
- ``dist.ddp --help`` and ``dist.spmd --help`` show boolean parameters as flags and the
  script's arguments as optional; ``--numa_strict`` and ``--debug`` work as bare flags (torchx
  parses every boolean as a value, so ``--numa_strict`` alone would be refused);
- a job the command waits for (every local job, ``--wait`` and ``--log`` elsewhere) is waited on
  by what its scheduler offers (records, engine events, a Kubernetes watch; not a one-second
  poll), with one line on standard error each time what it waits for changes (``progress.py``),
  and the command reads torchx's entry points once (``entry_point_cache.py``);
- such a job ends with
  one line: ``job cancelled: HANDLE`` when it was cancelled (from another shell, or by Ctrl+C
  here, which cancels it first; exit 130), or a short summary of the failure, instead of
  torchx's YAML dump of its status (torchx-nightly's ``--json`` prints the status as JSON on
  stdout first).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from torchx.cli.cmd_run import CmdRun
from torchx.runner import get_runner
from torchx.specs import AppState, AppStatus, parse_app_handle

from torchx_ext import exit_codes
from torchx_ext.cli.entry_point_cache import first_read_kept
from torchx_ext.cli.component_help import OUR_COMPONENTS, checked_component_args, component_help
from torchx_ext.cli.one_line import fail, one_line_errors
from torchx_ext.cli.progress import ProgressPrinter
from torchx_ext.cli.summary import failure_summary
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.common.scheduler import SchedulerShell

logger = logging.getLogger("torchx.cli.cmd_run")

_CANCEL_WAIT_S = 60.0
RECHECK_S = 5.0
"""How often a waiting CLI reads the job's state even when its scheduler's watch saw nothing: what
no watch shows (a Slurm job's pending reason, a job ended from outside) is said within this."""
TICK_S = 1.0


class CheckedRun(CmdRun):
    _json_output = False

    def run(self, args: argparse.Namespace) -> None:
        self._json_output = bool(getattr(args, "json", False))
        try:
            with one_line_errors(), first_read_kept():
                args.component_name_and_args = self._component_args(args.component_name_and_args)
                _check_cfg_keys(args)
                super().run(args)
        except KeyboardInterrupt:
            # Before the job's handle was known (a Ctrl+C while waiting is handled there).
            print("torchx: interrupted while submitting: `torchx list -s SCHEDULER` shows whether the job "
                  "was submitted", file=sys.stderr)
            sys.exit(exit_codes.INTERRUPTED)

    @staticmethod
    def _component_args(given: list[str]) -> list[str]:
        words = given[1:] if given[:1] == ["--"] else list(given)
        if not words or words[0] not in OUR_COMPONENTS:
            return given
        name = words[0]
        checked = checked_component_args(name, words[1:])
        if checked.wants_help:
            print(component_help(name))
            sys.exit(exit_codes.OK)
        return [name, *checked.args]

    # torchx 0.7.0 waits here, and prints the status and exits when the job did not succeed.
    def _wait_and_exit(self, runner: Any, app_handle: str, log: bool) -> None:
        self._wait_attached(runner, app_handle, (lambda: self._start_log_thread(runner, app_handle)) if log else None)

    # torchx-nightly waits here, and its caller prints the status and exits.
    def _wait(self, runner: Any, app_handle: str, log: bool, tee_logs: bool = False) -> AppStatus:
        start = (lambda: self._start_log_thread(runner, app_handle, tee_logs_enabled=tee_logs)) if log else None
        return self._wait_attached(runner, app_handle, start)

    def _wait_attached(
        self, runner: Any, app_handle: str, start_log_thread: Callable[[], threading.Thread] | None
    ) -> AppStatus:
        try:
            logger.info("Waiting for the app to finish...")
            log_thread = start_log_thread() if start_log_thread is not None else None
            # In place only on a terminal that streamed logs do not write to meanwhile.
            printer = ProgressPrinter(sys.stderr, in_place=log_thread is None and sys.stderr.isatty())
            try:
                status = wait_for_end(runner, app_handle, printer)
            finally:
                printer.close()
            if log_thread is not None:
                log_thread.join()
        except KeyboardInterrupt:
            _cancel_on_interrupt(runner, app_handle)
        if status is None:
            fail(f"{app_handle} is gone: its scheduler no longer knows it", exit_codes.FAILED)
        if status.state == AppState.SUCCEEDED:
            logger.info("Job finished: %s", status.state)
            return status
        if self._json_output:  # torchx-nightly's --json: the status as JSON, not its YAML dump
            from torchx.cli.cmd_run import _run_result_json

            print(json.dumps(_run_result_json(app_handle, status)))
        if status.state == AppState.CANCELLED:
            print(f"job cancelled: {app_handle}", file=sys.stderr)
        else:
            print(failure_summary(app_handle, status), file=sys.stderr)
        sys.exit(exit_codes.FAILED)


def wait_for_end(runner: Any, app_handle: str, printer: ProgressPrinter) -> AppStatus | None:
    """The job's status once it has ended (None: its scheduler forgot it), saying what it waits
    for meanwhile. Our schedulers are waited on by what they watch (``wait_for_change``), others by
    torchx's one-second poll."""
    scheduler_name, _, app_id = parse_app_handle(app_handle)
    scheduler = runner._scheduler(scheduler_name)  # torchx's own lookup (and cache), on both lines
    if not isinstance(scheduler, SchedulerShell):
        return runner.wait(app_handle, wait_interval=1)
    status = runner.status(app_handle)
    read_at = time.monotonic()
    while status is not None and not status.is_terminal():
        printer.show(status)
        wait_s = min(RECHECK_S, TICK_S) if printer.in_place else RECHECK_S
        waited_from = time.monotonic()
        changed = scheduler.wait_for_change(app_id, wait_s)
        if not changed:
            # A watch that gave up early (its stream ended) must not turn this into a busy loop.
            time.sleep(max(0.0, wait_s - (time.monotonic() - waited_from)))
        if changed or time.monotonic() - read_at >= RECHECK_S:
            status = runner.status(app_handle)
            read_at = time.monotonic()
        else:
            printer.tick()
    return status


def _cancel_on_interrupt(runner: Any, app_handle: str) -> NoReturn:
    """Ctrl+C while attached: cancel the job, wait (a while) for it to end, say so in one line.
    Another Ctrl+C meanwhile leaves at once, saying what was done."""
    sent = threading.Event()

    def leave_now(signum: int, frame: object) -> None:
        done = "being cancelled" if sent.is_set() else "cancel interrupted"
        print(f"job {done}: {app_handle} (`torchx status {app_handle}` says whether it still runs)", file=sys.stderr)
        sys.stderr.flush()
        os._exit(exit_codes.INTERRUPTED)  # nothing of torchx's teardown: it would cancel and wait again

    signal.signal(signal.SIGINT, leave_now)
    runner.cancel(app_handle)
    sent.set()
    deadline = time.monotonic() + _CANCEL_WAIT_S
    status = runner.status(app_handle)
    while status is not None and not status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.5)
        status = runner.status(app_handle)
    if status is None or status.is_terminal():
        print(f"job cancelled: {app_handle}", file=sys.stderr)
    else:
        print(f"job being cancelled: {app_handle} (still {status.state} after {_CANCEL_WAIT_S:.0f} s; "
              f"`torchx status {app_handle}` says when it has ended)", file=sys.stderr)
    # Said and done: another Ctrl+C while the interpreter shuts down (which gives SIGINT back its
    # default action, but leaves an ignored one ignored) would end it by the signal, not with 130.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(exit_codes.INTERRUPTED)


def _check_cfg_keys(args: argparse.Namespace) -> None:
    # torchx-nightly refuses a -cfg key its scheduler does not have; torchx 0.7.0 drops it
    # silently, so a misspelt namespace or queue would submit somewhere unintended.
    text = getattr(args, "scheduler_args", None)
    scheduler = getattr(args, "scheduler", None)
    if not isinstance(text, str) or not text.strip() or not scheduler:
        return
    from torchx.util.types import to_dict

    with get_runner() as runner:
        opts = runner.scheduler_run_opts(scheduler)
    unknown = [key for key in to_dict(text) if opts.get(key) is None]
    if unknown:
        valid = ", ".join(sorted(name for name, _ in opts))
        raise InvalidArgumentError(
            f"unknown -cfg option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} for scheduler "
            f"{scheduler}{_lacked(scheduler, unknown)}: its options are {valid}")


def _lacked(scheduler: str, keys: list[str]) -> str:
    """Why ``scheduler`` has no option for each of ``keys`` that asks for a feature it lacks."""
    from torchx_ext.schedulers.backends import FEATURES, backend_named

    backend = backend_named(scheduler)
    if backend is None:
        return ""
    whys = [f"{feature.option}: {why}" for feature in FEATURES if feature.option in keys
            for why in [backend.why_not(feature.name)] if why]
    return f" ({'; '.join(whys)})" if whys else ""

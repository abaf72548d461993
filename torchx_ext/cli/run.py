"""torchx's ``run``, with our components' help and input errors in the form a user expects and an
attached job's end said in one line.

What changes from torchx's own ``run`` (on both torchx lines):

- an input error of our components or schedulers is one ``torchx: error:`` line, exit 2
  (``TORCHX_EXT_DEBUG=1`` shows the traceback instead);
- ``dist.ddp --help`` and ``dist.spmd --help`` show boolean parameters as flags and the
  script's arguments as optional; ``--numa_strict`` and ``--debug`` work as bare flags (torchx
  parses every boolean as a value, so ``--numa_strict`` alone would be refused);
- a job the command waits for (every local job, ``--wait`` and ``--log`` elsewhere) ends with
  one line: ``job cancelled: HANDLE`` when it was cancelled (from another shell, or by Ctrl+C
  here, which cancels it first), or a short summary of the failure, instead of torchx's YAML
  dump of its status.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from torchx.cli.cmd_run import CmdRun
from torchx.runner import get_runner
from torchx.specs import AppState, AppStatus

from torchx_ext import exit_codes
from torchx_ext.cli.component_help import OUR_COMPONENTS, checked_component_args, component_help
from torchx_ext.cli.handles import fail, one_line_errors
from torchx_ext.cli.summary import failure_summary
from torchx_ext.errors import InvalidArgumentError

logger = logging.getLogger("torchx.cli.cmd_run")

_CANCEL_WAIT_S = 60.0


class CheckedRun(CmdRun):
    def run(self, args: argparse.Namespace) -> None:
        self._json_output = bool(getattr(args, "json", False))
        with one_line_errors():
            args.component_name_and_args = self._component_args(args.component_name_and_args)
            _check_cfg_keys(args)
            super().run(args)

    @staticmethod
    def _component_args(given: list[str]) -> list[str]:
        words = given[1:] if given[:1] == ["--"] else list(given)
        if not words or words[0] not in OUR_COMPONENTS:
            return given
        name, component_args = words[0], words[1:]
        options = component_args[: component_args.index("--")] if "--" in component_args else component_args
        if "--help" in options:  # as torchx's parser, anywhere before --
            print(component_help(name))
            sys.exit(exit_codes.OK)
        return [name, *checked_component_args(name, component_args)]

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
        logger.info("Waiting for the app to finish...")
        log_thread = start_log_thread() if start_log_thread is not None else None
        try:
            status = runner.wait(app_handle, wait_interval=1)
        except KeyboardInterrupt:
            _cancel_on_interrupt(runner, app_handle, log_thread)
        if log_thread is not None:
            log_thread.join()
        if status is None:
            fail(f"{app_handle} is gone: its scheduler no longer knows it", exit_codes.FAILED)
        if self._json_output:
            return status  # torchx prints the status as JSON
        if status.state == AppState.CANCELLED:
            print(f"job cancelled: {app_handle}", file=sys.stderr)
            sys.exit(exit_codes.FAILED)
        if status.state != AppState.SUCCEEDED:
            print(failure_summary(app_handle, status), file=sys.stderr)
            sys.exit(exit_codes.FAILED)
        logger.info("Job finished: %s", status.state)
        return status


def _cancel_on_interrupt(runner: Any, app_handle: str, log_thread: threading.Thread | None) -> NoReturn:
    """Ctrl+C while attached: cancel the job, wait (briefly) for it to end, say so in one line.
    A second Ctrl+C leaves at once; the job is then still being cancelled by its scheduler."""
    try:
        runner.cancel(app_handle)
        deadline = time.monotonic() + _CANCEL_WAIT_S
        while time.monotonic() < deadline:
            status = runner.status(app_handle)
            if status is None or status.is_terminal():
                break
            time.sleep(0.5)
        if log_thread is not None:
            log_thread.join(timeout=5)
    except KeyboardInterrupt:
        print(f"job being cancelled: {app_handle} (`torchx status {app_handle}` tells when it has ended)",
              file=sys.stderr)
        sys.exit(exit_codes.INTERRUPTED)
    print(f"job cancelled: {app_handle}", file=sys.stderr)
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
            f"{scheduler}: its options are {valid}")

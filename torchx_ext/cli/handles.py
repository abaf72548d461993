"""torchx's status, describe, log and cancel, refusing a malformed or unknown app handle clearly;
and torchx's run, reporting our components' and schedulers' input errors in one line.

torchx 0.7.0's own commands answer a malformed handle with a traceback, ``cancel`` of an
unknown app with silence and exit 0, and ``log`` of an unknown app by waiting forever. These
subclasses check the handle first (exit 1 with one line naming the bad value and the form),
then run torchx's command unchanged.
"""

import argparse
import re
import sys
from typing import NoReturn

from torchx.cli.cmd_cancel import CmdCancel
from torchx.cli.cmd_describe import CmdDescribe
from torchx.cli.cmd_log import CmdLog
from torchx.cli.cmd_run import CmdRun
from torchx.cli.cmd_status import CmdStatus
from torchx.runner import get_runner

from torchx_ext.errors import TorchxExtError

HANDLE_FORM = "SCHEDULER://SESSION/APP_ID, e.g. local_cwd://torchx/train-abc123 (`torchx list -s SCHEDULER` shows them)"
_HANDLE = re.compile(r"(?P<scheduler>[\w-]+)://(?P<session>[^/]*)/(?P<app_id>[^/]+)(?P<rest>/.*)?")


def check_app_handle(identifier: str, allow_replicas: bool = False) -> str:
    """The app handle in ``identifier``; exits 1 when it is malformed or names no app."""
    match = _HANDLE.fullmatch(identifier)
    if match is None or (match["rest"] and not allow_replicas):
        forms = f"{HANDLE_FORM}, optionally followed by /ROLE/REPLICA_IDS" if allow_replicas else HANDLE_FORM
        _fail(f"malformed app handle {identifier!r}: expected {forms}")
    handle = f"{match['scheduler']}://{match['session']}/{match['app_id']}"
    try:
        with get_runner() as runner:
            status = runner.status(handle)
    except KeyError as error:  # a scheduler name torchx does not know
        _fail(f"unknown scheduler in app handle {identifier!r}: {error.args[0]}")
    if status is None:
        _fail(f"no app {match['app_id']!r} on {match['scheduler']} (`torchx list -s {match['scheduler']}` shows the known ones)")
    return handle


def _fail(message: str) -> NoReturn:
    print(f"torchx: error: {message}", file=sys.stderr)
    sys.exit(1)


class _HandleChecked:
    """Checks the command's app handle argument, then runs torchx's command (the next base)."""

    handle_argument = "app_handle"
    allow_replicas = False

    def run(self, args: argparse.Namespace) -> None:
        check_app_handle(getattr(args, self.handle_argument), allow_replicas=self.allow_replicas)
        super().run(args)  # type: ignore[misc]


class CheckedStatus(_HandleChecked, CmdStatus):
    pass


class CheckedDescribe(_HandleChecked, CmdDescribe):
    pass


class CheckedCancel(_HandleChecked, CmdCancel):
    pass


class CheckedLog(_HandleChecked, CmdLog):
    handle_argument = "identifier"
    allow_replicas = True


class CheckedRun(CmdRun):
    def run(self, args: argparse.Namespace) -> None:
        # Our errors name the bad value and the valid forms already; a traceback adds nothing.
        try:
            super().run(args)
        except TorchxExtError as error:
            _fail(str(error))

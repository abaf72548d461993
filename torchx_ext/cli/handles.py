"""torchx's status, describe, log and cancel, refusing a malformed or unknown app handle (and,
for log, an unknown role or replica) clearly. ``run.py`` has torchx's ``run``.

torchx's own commands answer a malformed handle or an unknown scheduler with a traceback, and
torchx 0.7.0 answers ``cancel`` of an unknown app with silence and exit 0 and ``log`` of one by
waiting forever. These subclasses check the handle first (one ``torchx: error:`` line naming
the bad value and the valid forms; exit codes from ``torchx_ext.exit_codes``), then run
torchx's command unchanged. Both torchx lines have these commands; ``delete.py`` has
torchx-nightly's ``delete``.
"""

import argparse
import re
from collections.abc import Iterable

from torchx.cli.cmd_cancel import CmdCancel
from torchx.cli.cmd_describe import CmdDescribe
from torchx.cli.cmd_list import CmdList
from torchx.cli.cmd_log import CmdLog
from torchx.cli.cmd_status import CmdStatus
from torchx.runner import get_runner
from torchx.schedulers import get_scheduler_factories
from torchx.specs import Role, parse_app_handle

from torchx_ext import exit_codes
from torchx_ext.cli.one_line import fail, one_line_errors
from torchx_ext.errors import InvalidArgumentError

HANDLE_FORM = "SCHEDULER://SESSION/APP_ID, e.g. local_cwd://torchx/train-abc123 (`torchx list -s SCHEDULER` shows them)"
_HANDLE = re.compile(r"(?P<scheduler>[\w-]+)://(?P<session>[^/]*)/(?P<app_id>[^/]+)(?P<rest>/.*)?")


def check_app_handle(identifier: str, allow_replicas: bool = False) -> str:
    """The app handle in ``identifier``; exits when it is malformed, names a scheduler torchx
    does not have (both BAD_INPUT) or names no app (NOT_FOUND)."""
    match = _HANDLE.fullmatch(identifier)
    if match is None or (match["rest"] and not allow_replicas):
        forms = f"{HANDLE_FORM}, optionally followed by /ROLE/REPLICA_IDS" if allow_replicas else HANDLE_FORM
        fail(f"malformed app handle {identifier!r}: expected {forms}", exit_codes.BAD_INPUT)
    scheduler = match["scheduler"]
    # Checked here rather than caught: torchx 0.7.0 raises KeyError, nightly its own exception.
    known = list(get_scheduler_factories())
    if scheduler not in known:
        fail(f"unknown scheduler {scheduler!r} in app handle {identifier!r}: this torchx has {', '.join(known)}",
             exit_codes.BAD_INPUT)
    handle = f"{scheduler}://{match['session']}/{match['app_id']}"
    with one_line_errors(), get_runner() as runner:  # e.g. no container engine answers
        status = runner.status(handle)
    if status is None:
        fail(f"no app {match['app_id']!r} on {scheduler} (`torchx list -s {scheduler}` shows the known ones)",
             exit_codes.NOT_FOUND)
    return handle


class HandleChecked:
    """Checks the command's app handle argument, then runs torchx's command (the next base)."""

    def run(self, args: argparse.Namespace) -> None:
        with one_line_errors():
            check_app_handle(args.app_handle)
            super().run(args)  # type: ignore[misc]


class CheckedList(CmdList):
    def run(self, args: argparse.Namespace) -> None:
        with one_line_errors():
            super().run(args)


class CheckedStatus(HandleChecked, CmdStatus):
    """torchx's status, then the image each role runs where it is pinned by digest (a kubernetes
    workspace's): which code the job runs, which torchx's status does not say."""

    def run(self, args: argparse.Namespace) -> None:
        super().run(args)
        with one_line_errors(), get_runner() as runner:
            app = runner.describe(args.app_handle)
        for line in pinned_images(app.roles if app is not None else []):
            print(line)


def pinned_images(roles: Iterable[Role]) -> list[str]:
    """``Image (ROLE): REPO@sha256:...`` for each role whose image names a digest."""
    return [f"    Image ({role.name}): {role.image}" for role in roles if "@sha256:" in str(role.image)]


class CheckedDescribe(HandleChecked, CmdDescribe):
    pass


class CheckedCancel(HandleChecked, CmdCancel):
    pass


class CheckedLog(CmdLog):
    def run(self, args: argparse.Namespace) -> None:
        with one_line_errors():
            handle = check_app_handle(args.identifier, allow_replicas=True)
            check_replicas(handle, args.identifier[len(handle):])
            super().run(args)


def check_replicas(handle: str, path: str) -> None:
    """Exits (BAD_INPUT) when ``path`` (``/ROLE`` or ``/ROLE/ID,ID``, or empty) names a role or
    replica the app does not have; torchx's log would fail in a thread, with a traceback each."""
    role, _, ids = path.lstrip("/").partition("/")
    if not role:
        return
    app_id = parse_app_handle(handle).app_id
    with get_runner() as runner:
        app = runner.describe(handle)
        roles = {} if app is None else {known.name: known for known in app.roles}
        if role not in roles:
            fail(f"app {app_id} has no role {role!r}: it has {', '.join(roles) or 'none'}", exit_codes.BAD_INPUT)
        replicas = [f"{role}/{index}" for index in range(roles[role].num_replicas)]
        for text in filter(None, ids.split(",")):
            if not (text.isascii() and text.isdigit()):
                fail(f"malformed replica id {text!r} in {handle + path!r}: expected numbers, e.g. {role}/0 or {role}/0,1",
                     exit_codes.BAD_INPUT)
            if int(text) >= len(replicas):
                fail(f"app {app_id} has no replica {role}/{text}: it has {', '.join(replicas)}", exit_codes.BAD_INPUT)
            # Ours know the replicas that really ran (an elastic job's may be fewer): they refuse here.
            runner.log_lines(handle, role, int(text), should_tail=False)

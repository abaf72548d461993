"""``torchx delete APP_HANDLE`` for torchx 0.7.0, which has no such command: what torchx-nightly's
does (cancel the app if it runs, then remove what the scheduler keeps of it: local_cwd's job
directory, local_docker's stopped containers, network and records), with the handle checked
first as ``handles.py`` checks it for the other commands.

Registered only where torchx 0.7.0 is installed (``torchx_ext/registration/torchx_0_7_0``);
nightly gets its own command, checked the same way, from ``delete.py``.
"""

import argparse

from torchx.cli.cmd_base import SubCommand
from torchx.schedulers import get_scheduler_factories
from torchx.specs import parse_app_handle

from torchx_ext import exit_codes
from torchx_ext.cli.handles import HANDLE_FORM, check_app_handle
from torchx_ext.cli.one_line import fail, one_line_errors


class Delete(SubCommand):
    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument("app_handle", type=str, help=f"the app to delete: {HANDLE_FORM}")

    def run(self, args: argparse.Namespace) -> None:
        handle = check_app_handle(args.app_handle)
        parsed = parse_app_handle(handle)
        scheduler = get_scheduler_factories()[parsed.scheduler_backend](parsed.session_name)
        try:
            delete = getattr(scheduler, "delete", None)
            if delete is None:
                fail(f"scheduler {parsed.scheduler_backend} cannot delete apps on torchx 0.7.0: "
                     f"`torchx cancel {handle}` stops it", exit_codes.BAD_INPUT)
            with one_line_errors():
                delete(parsed.app_id)
        finally:
            scheduler.close()

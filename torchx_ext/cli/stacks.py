"""``torchx stacks HANDLE [ROLE[/REPLICA]]``: every rank's stack of a running job, read from its logs.

    torchx stacks local_cwd://torchx/train-abc123            # every running replica
    torchx stacks slurm://torchx/1234 train/1                # one replica

Asks the launchers of the job's running replicas, each scheduler by its own means (a signal to the
replica's process, to its container, to the job's steps: ``stack_request.py``), to write every
local rank's stack into their logs, then reads each log until its new block has come and prints
it. Nothing is stopped or started. No torch import: the torchx CLI loads every subcommand.
"""

import argparse
import re
import time

from torchx.cli.cmd_base import SubCommand

from torchx_ext import exit_codes
from torchx_ext.cli.handles import check_app_handle
from torchx_ext.cli.one_line import fail, one_line_errors
from torchx_ext.errors import InvalidArgumentError

_TARGET = re.compile(r"(?P<role>[^/]+)(?:/(?P<replica>\d+))?")
DEFAULT_WAIT_S = 20.0
_POLL_S = 0.5


class CmdStacks(SubCommand):
    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument("app_handle", help="the job's handle, e.g. local_cwd://torchx/train-abc123")
        subparser.add_argument("target", nargs="?", default=None,
                               help="ROLE or ROLE/REPLICA to ask (default: every running replica)")
        subparser.add_argument("--wait", type=float, default=DEFAULT_WAIT_S,
                               help=f"seconds to wait for each replica's answer (default {DEFAULT_WAIT_S:g})")

    def run(self, args: argparse.Namespace) -> None:
        from torchx.schedulers import get_scheduler_factories
        from torchx.specs import parse_app_handle

        from torchx_ext.schedulers.common.scheduler import SchedulerShell

        role, replica = _target(args.target)
        handle = check_app_handle(args.app_handle)
        scheduler_name, session, app_id = parse_app_handle(handle)
        with one_line_errors():
            scheduler = get_scheduler_factories()[scheduler_name](session_name=session or "torchx")
            if not isinstance(scheduler, SchedulerShell):
                raise InvalidArgumentError(f"scheduler {scheduler_name!r} is not torchx_ext's: it cannot be asked "
                                           "for stacks (local_cwd, local_docker, slurm and kubernetes can)")
            answered = ask_and_read(scheduler, app_id, role, replica, args.wait)
        missing = [key for key, block in answered.items() if block is None]
        for (role_name, index), block in answered.items():
            print(f"== {role_name}/{index} ==")
            print("\n".join(block) if block is not None else
                  f"(no stacks within {args.wait:g} s: its launcher is stopped, or older than torchx stacks)", flush=True)
        if missing:
            fail(f"no stacks from {', '.join(f'{name}/{index}' for name, index in missing)} within {args.wait:g} s",
                 exit_codes.FAILED)


def ask_and_read(scheduler: object, app_id: str, role: str | None, replica: int | None,
                 wait_s: float) -> dict[tuple[str, int], list[str] | None]:
    """Ask the chosen running replicas for their stacks; each one's new block (None: none came in time)."""
    from torchx_ext.schedulers.common.scheduler import SchedulerShell
    from torchx_ext.stack_request import blocks

    assert isinstance(scheduler, SchedulerShell)

    def asked_blocks(key: tuple[str, int]) -> list[list[str]]:
        return blocks(scheduler.log_iter(app_id, key[0], key[1]), asked_only=True)

    described = scheduler.describe(app_id)
    if described is None:
        raise scheduler.unknown_app(app_id)
    # The blocks each log holds already: the answer is the next one (no clock of another host is read).
    candidates = [(status.role, each.id) for status in described.roles_statuses for each in status.replicas
                  if role in (None, status.role) and replica in (None, each.id)]
    before = {key: len(asked_blocks(key)) for key in candidates}
    chosen = scheduler.ask_for_stacks(app_id, role, replica)
    answers: dict[tuple[str, int], list[str] | None] = {key: None for key in chosen}
    deadline = time.monotonic() + wait_s
    while any(block is None for block in answers.values()) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        for key in [key for key, block in answers.items() if block is None]:
            found = asked_blocks(key)
            if len(found) > before.get(key, 0):
                answers[key] = found[before.get(key, 0)]
    return answers


def _target(text: str | None) -> tuple[str | None, int | None]:
    if text is None:
        return None, None
    match = _TARGET.fullmatch(text)
    if match is None:
        fail(f"invalid target {text!r}: expected ROLE or ROLE/REPLICA, e.g. trainer/1", exit_codes.BAD_INPUT)
    return match["role"], None if match["replica"] is None else int(match["replica"])

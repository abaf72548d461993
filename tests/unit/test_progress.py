"""What ``torchx run --wait`` prints while it waits (torchx_ext.cli.progress)."""

from __future__ import annotations

import io

from torchx.specs import AppState, AppStatus, ReplicaStatus, RoleStatus

from torchx_ext.cli.progress import ProgressPrinter, progress_of


def status(state: AppState, msg: str = "", replicas: list[tuple[int, AppState, str]] | None = None,
           num_restarts: int = 0) -> AppStatus:
    roles = [RoleStatus("trainer", [ReplicaStatus(k, replica_state, "trainer", host)
                                    for k, replica_state, host in (replicas or [])])]
    return AppStatus(state, num_restarts=num_restarts, msg=msg, roles=roles)


def test_a_pending_job_says_why_and_since_when() -> None:
    progress = progress_of(status(AppState.PENDING, msg="pending: Priority"))
    assert progress is not None
    assert progress.line(25.4) == "torchx: pending (Priority), 25 s since submission"


def test_a_running_job_says_where_each_replica_runs_and_which_are_not_running_yet() -> None:
    progress = progress_of(status(AppState.RUNNING, replicas=[(0, AppState.RUNNING, "node1"),
                                                              (1, AppState.PENDING, "")]))
    assert progress is not None
    assert progress.line(3.25) == ("torchx: running trainer/0 on node1; not running yet: trainer/1 "
                                   "(3.2 s since submission)")


def test_many_replicas_are_counted_by_host() -> None:
    progress = progress_of(status(AppState.RUNNING, replicas=[(k, AppState.RUNNING, f"node{k // 2}") for k in range(8)]))
    assert progress is not None
    assert progress.detail.startswith("running 8 replicas on 4 hosts (trainer/0 on node0, trainer/1 on node0, ")


def test_a_job_whose_replicas_are_not_running_yet_is_starting_them() -> None:
    progress = progress_of(status(AppState.RUNNING, replicas=[(0, AppState.PENDING, ""), (1, AppState.PENDING, "")]))
    assert progress is not None and progress.line(8.4) == "torchx: starting trainer/0, trainer/1 (8.4 s since submission)"


def test_restarts_are_said() -> None:
    progress = progress_of(status(AppState.RUNNING, replicas=[(0, AppState.RUNNING, "a")], num_restarts=2))
    assert progress is not None and progress.detail.endswith("; 2 restarts so far")


def test_an_ended_job_or_one_whose_replicas_all_ended_says_nothing_more() -> None:
    assert progress_of(status(AppState.SUCCEEDED)) is None
    assert progress_of(status(AppState.RUNNING, replicas=[(0, AppState.SUCCEEDED, "a")])) is None


def test_into_a_pipe_each_change_is_one_plain_line_and_repeats_are_not_printed() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, in_place=False)
    printer.show(status(AppState.PENDING, msg="pending: Resources"))
    printer.show(status(AppState.PENDING, msg="pending: Resources"))
    printer.tick()
    printer.show(status(AppState.RUNNING, replicas=[(0, AppState.RUNNING, "node2")]))
    printer.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue()
    assert lines[0].startswith("torchx: pending (Resources), ")
    assert lines[1].startswith("torchx: running trainer/0 on node2 (")


def test_on_a_terminal_the_line_is_redrawn_in_place_and_ended_with_a_newline() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, in_place=True)
    printer.show(status(AppState.PENDING, msg="pending: Priority"))
    printer.tick()
    printer.show(status(AppState.RUNNING, replicas=[(0, AppState.RUNNING, "node1")]))
    printer.close()
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 3  # drawn, redrawn, the next state drawn
    assert text.endswith("\n") and text.count("\n") == 2  # the pending line stays, the running one ends

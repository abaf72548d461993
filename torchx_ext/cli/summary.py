"""What an attached ``torchx run`` says when its job did not succeed: a few lines a person reads
(state, the replica that failed and its error, where its output is), not torchx's YAML dump."""

from __future__ import annotations

from torchx.specs import NONE, AppState, AppStatus

from torchx_ext.error_file import parse_error_report


def failure_summary(app_handle: str, status: AppStatus) -> str:
    state = AppState(status.state).name.lower()
    lines = [f"job {state}: {app_handle}"]
    if status.msg:
        # Our schedulers' message already names the replica, how it ended and its logs.
        lines.append(f"  {status.msg}")
    else:
        for role in status.roles:
            for replica in role.replicas:
                error = error_message(replica.structured_error_msg)
                if error or replica.state == AppState.FAILED:
                    lines.append(f"  replica {role.role}/{replica.id} {AppState(replica.state).name.lower()}"
                                 f"{': ' + error if error else ''}")
    lines.append(f"  its output: torchx log {app_handle}")
    return "\n".join(lines)


def error_message(structured: str | None) -> str:
    """The message of a torchelastic error report as torchx carries it; "" for none; the text
    itself when it is no such report."""
    if not structured or structured == NONE:
        return ""
    report = parse_error_report(structured)
    return report.message.strip() if report is not None else structured.strip()

"""Status conditions as the fake cluster's controllers write them, the way apimachinery's
helpers do: one condition per type, replaced in place, its transition time kept when only the
time would change."""

from __future__ import annotations

from typing import Any

from tests.kubernetes.apiserver.store import now_rfc3339


def condition(kind: str, status: bool = True, reason: str | None = None, message: str | None = None, *,
              probed: bool = False) -> dict[str, Any]:
    """A new condition; ``probed``: with a ``lastProbeTime`` (Jobs' conditions have one)."""
    now = now_rfc3339()
    made: dict[str, Any] = {"type": kind, "status": "True" if status else "False"}
    if reason is not None:
        made["reason"] = reason
    if message is not None:
        made["message"] = message
    if probed:
        made["lastProbeTime"] = now
    made["lastTransitionTime"] = now
    return made


def set_condition(status: dict[str, Any], new: dict[str, Any]) -> None:
    """Put ``new`` in ``status.conditions``: in place of the one of its type (kept as it is when
    status, reason and message are the same), else at the end."""
    conditions = status.setdefault("conditions", [])
    for position, old in enumerate(conditions):
        if old["type"] == new["type"]:
            if any(old.get(key) != new.get(key) for key in ("status", "reason", "message")):
                conditions[position] = new
            return
    conditions.append(new)


def true_condition(status: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The condition of type ``kind`` in ``status``, when it holds."""
    return next((found for found in (status or {}).get("conditions") or []
                 if found.get("type") == kind and found.get("status") == "True"), None)

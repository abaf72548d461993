"""Kubernetes ``Status`` errors, worded as the real API server words them (clients and the scheduler
under test may match on reason, code or message)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           409: "AlreadyExists", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


@dataclass
class ApiError(Exception):
    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def qualified(plural: str, group: str) -> str:
    """``jobs.batch`` for grouped resources, ``pods`` for the core group: how messages name them."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(plural, group)} "{name}" not found',
                    {"name": name, "group": group, "kind": plural} if group else {"name": name, "kind": plural})


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists',
                    {"name": name, "group": group, "kind": plural} if group else {"name": name, "kind": plural})


def conflict(plural: str, group: str, name: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": the object '
                    "has been modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": group, "kind": plural})


def forbidden(plural: str, group: str, verb: str, namespace: str, name: str = "",
              user: str = "system:serviceaccount:test:test") -> ApiError:
    target = f'{qualified(plural, group)} "{name}"' if name else qualified(plural, group)
    message = (f'{target} is forbidden: User "{user}" cannot {verb} resource "{plural}" in API group "{group}" '
               f'in the namespace "{namespace}"')
    details: dict[str, Any] = {"group": group, "kind": plural}
    if name:
        details["name"] = name
    return ApiError(403, "Forbidden", message, details)


@dataclass(frozen=True)
class FieldError:
    """One validation failure; ``text`` is what follows the field path, e.g. ``Required value``."""
    path: str
    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueTooLong
    text: str

    def render(self) -> str:
        return f"{self.path}: {self.text}"


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    # The real server lists several errors in brackets, one bare.
    rendered = [error.render() for error in errors]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    causes = [{"reason": e.reason, "message": e.text, "field": e.path} for e in errors]
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def injected(code: int) -> ApiError:
    """What ``TestCluster.fail_next`` answers: a plausible Status for that code."""
    return ApiError(code, REASONS.get(code, "Unknown"), f"injected failure ({code}) by the test cluster")

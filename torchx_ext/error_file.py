"""torchelastic's error-file shape: the one place that reads, parses and writes it.

torchelastic's ``@record`` writes ``{"message": {"message": ..., "extraInfo": {"py_callstack":
..., "timestamp": ...}, "errorCode": ...}}`` to ``$TORCHELASTIC_ERROR_FILE``; torchx parses the
same shape out of a scheduler's ``structured_error_msg``. The launcher writes one for a worker
that exited without raising, schedulers read the launcher's and hand one to torchx. A leaf
module, below both (standard library only).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

# The report's own message: written before the traceback, it survives a cut that loses the rest.
_MESSAGE_OF_REPORT = re.compile(r'\{"message": \{"message": ("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True)
class ErrorReport:
    message: str
    """One line: what failed (``rank 3 (local rank 1) exited with code 7``, or the exception)."""
    error_code: int | None = None
    timestamp: int | None = None
    traceback: str = ""
    """The failing worker's Python call stack, when it raised."""

    def to_json(self) -> str:
        extra: dict[str, str] = {"timestamp": str(self.timestamp if self.timestamp is not None else int(time.time()))}
        if self.traceback:
            extra["py_callstack"] = self.traceback
        return json.dumps({"message": {"message": self.message, "extraInfo": extra, "errorCode": self.error_code}})

    @staticmethod
    def from_data(data: object) -> "ErrorReport | None":
        """The report in parsed error-file content (a dict), or None when it is not one."""
        if not isinstance(data, dict) or "message" not in data:
            return None
        body = data["message"]
        if not isinstance(body, dict):
            return ErrorReport(message=str(body).strip())
        extra = body.get("extraInfo")
        extra = extra if isinstance(extra, dict) else {}
        code = body.get("errorCode")
        stamp = extra.get("timestamp")
        return ErrorReport(
            message=str(body.get("message", "")).strip(),
            error_code=code if isinstance(code, int) else None,
            timestamp=int(stamp) if isinstance(stamp, (int, str)) and str(stamp).isdigit() else None,
            traceback=str(extra.get("py_callstack") or ""),
        )


def parse_error_report(text: str | bytes) -> ErrorReport | None:
    """The report in an error file's content; None when it is not in torchelastic's shape.
    Content cut short (Kubernetes keeps 4 KiB of a termination message) still gives its message."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if not text.strip().startswith("{"):
        return None
    try:
        return ErrorReport.from_data(json.loads(text))
    except ValueError:
        match = _MESSAGE_OF_REPORT.search(text)
        return ErrorReport(message=json.loads(match[1])) if match else None


def read_error_file(path: str | os.PathLike[str]) -> ErrorReport | None:
    """The report in ``path``; None when there is none or it is not in torchelastic's shape."""
    try:
        return parse_error_report(Path(path).read_text())
    except OSError:
        return None


def write_error_file(path: str | os.PathLike[str], report: ErrorReport, *, replace: bool = False) -> bool:
    """Write ``report`` to ``path``. Without ``replace`` an existing report is kept (the first
    failure is the root cause); with it, one left by an earlier run is replaced, as torchrun's
    agent does with its own file. Returns whether it was written; an unwritable path is not an
    error (the exit code and stderr still tell the story)."""
    if not replace:
        try:
            with open(path, "x") as file:
                file.write(report.to_json())
        except OSError:
            return False
        return True
    temporary = f"{os.fspath(path)}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w") as file:
            file.write(report.to_json())
        os.replace(temporary, path)  # readers see the old report or the new, never half
    except OSError:
        Path(temporary).unlink(missing_ok=True)
        # A file mounted in place (Kubernetes' /dev/termination-log) cannot be replaced, and
        # its directory may not be writable: it is written over instead.
        try:
            with open(path, "r+") as file:
                file.write(report.to_json())
                file.truncate()
        except OSError:
            return False
    return True

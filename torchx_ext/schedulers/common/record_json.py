"""A job record as JSON: its format number, and its keys checked against a dataclass's fields
(local_cwd's request and state). Standard library only: the local supervisor imports it."""

from __future__ import annotations

import json
from dataclasses import MISSING
from typing import Any, TypeVar

from torchx_ext.errors import JobRecordError

FORMAT_KEY = "format"
"""Written into every record; a record of another format is reported, not guessed at."""
Record = TypeVar("Record")


def versioned(text: str, versions: tuple[int, ...]) -> tuple[int, dict[str, Any]]:
    """The record's format (one of ``versions``) and its other keys; JobRecordError otherwise."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise JobRecordError(f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise JobRecordError(f"expected a JSON object, found {type(data).__name__}")
    version = data.pop(FORMAT_KEY, None)
    if version not in versions:
        raise JobRecordError(
            f"record format {version!r}, this torchx_ext reads format {' or '.join(map(str, versions))} "
            "(written by another version of torchx_ext: use that version, or remove the job)"
        )
    return version, data


def fields_of(cls: type[Record], data: object) -> dict[str, Any]:
    """``data`` as keyword arguments for dataclass ``cls``, refusing unknown and missing keys."""
    if not isinstance(data, dict):
        raise JobRecordError(f"expected an object for {cls.__name__}, found {type(data).__name__}")
    known = {name for name in cls.__dataclass_fields__}  # type: ignore[attr-defined]
    required = {
        name for name, spec in cls.__dataclass_fields__.items()  # type: ignore[attr-defined]
        if spec.default is MISSING and spec.default_factory is MISSING
    }
    unknown, missing = sorted(set(data) - known), sorted(required - set(data))
    if unknown or missing:
        problems = [f"unknown key(s) {', '.join(unknown)}"] if unknown else []
        problems += [f"missing key(s) {', '.join(missing)}"] if missing else []
        raise JobRecordError(f"{cls.__name__}: {'; '.join(problems)}")
    return data


def list_of(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise JobRecordError(f"expected a list, found {type(value).__name__}")
    return value

"""Validation of custom objects against the schemas their CRDs publish (the files vendored in
tests/unit/schemas), as the API server validates them on create and update: types, enums,
required fields, bounds. (It would also prune unknown fields; here they are kept.)"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.kubernetes.apiserver.errors import FieldError

SCHEMAS = Path(__file__).parents[2] / "unit" / "schemas"


@cache
def _validator(file: str, version: str) -> Any:
    crd = yaml.safe_load((SCHEMAS / file).read_text())
    schema = next(served["schema"]["openAPIV3Schema"] for served in crd["spec"]["versions"] if served["name"] == version)
    return jsonschema.Draft7Validator(_int_or_string(schema))


def _int_or_string(schema: Any) -> Any:
    if isinstance(schema, dict):
        converted = {key: _int_or_string(value) for key, value in schema.items()}
        if schema.get("x-kubernetes-int-or-string"):
            converted.pop("type", None)
            converted["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return converted
    if isinstance(schema, list):
        return [_int_or_string(item) for item in schema]
    return schema


def crd_errors(file: str, version: str) -> Callable[[dict[str, Any]], list[FieldError]]:
    def errors(obj: dict[str, Any]) -> list[FieldError]:
        found = []
        for error in _validator(file, version).iter_errors(obj):
            path = ".".join(str(part) if not isinstance(part, int) else f"[{part}]" for part in error.absolute_path)
            found.append(FieldError(path.replace(".[", "["), "FieldValueInvalid", error.message))
        return found

    return errors

"""Validation of custom objects against the schemas their CRDs publish (the files vendored in
tests/unit/schemas), as the API server validates them on create and update: types, enums,
required fields, bounds. (It would also prune unknown fields; here they are kept.)"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema

from tests.fixtures.crd_schemas import crd_json_schema
from tests.kubernetes.apiserver.errors import FieldError


@cache
def _validator(kind: str) -> Any:
    return jsonschema.Draft7Validator(crd_json_schema(kind))


def crd_errors(kind: str) -> Callable[[dict[str, Any]], list[FieldError]]:
    def errors(obj: dict[str, Any]) -> list[FieldError]:
        found = []
        for error in _validator(kind).iter_errors(obj):
            path = ".".join(str(part) if not isinstance(part, int) else f"[{part}]" for part in error.absolute_path)
            found.append(FieldError(path.replace(".[", "["), "FieldValueInvalid", error.message))
        return found

    return errors

"""PATCH bodies: JSON merge patch (RFC 7386) for objects, which is also how strategic merge patches are
applied here (lists are replaced whole), and JSON patch (RFC 6902) add/replace/remove/test."""

from __future__ import annotations

import copy
from typing import Any

from tests.kubernetes.apiserver.errors import ApiError, bad_request


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise bad_request(f"the server rejected our request due to an error in our request: invalid path {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str]) -> Any:
    node = document
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def json_patch(document: Any, operations: list[dict[str, Any]]) -> Any:
    result = copy.deepcopy(document)
    for operation in operations:
        op, parts = operation.get("op"), _pointer(str(operation.get("path", "")))
        try:
            parent, last = _parent(result, parts), parts[-1]
            if op == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), operation["value"])
                else:
                    parent[last] = operation["value"]
            elif op == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = operation["value"]
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = operation["value"]
            elif op == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif op == "test":
                current = parent[int(last)] if isinstance(parent, list) else parent[last]
                if current != operation.get("value"):
                    raise ApiError(422, "Invalid", f"testing value {operation.get('path')} failed")
            else:
                raise bad_request(f"Unexpected kind: {op}")
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                           f"{op} operation does not apply: doc is missing path: \"{operation.get('path')}\"") from error
    return result

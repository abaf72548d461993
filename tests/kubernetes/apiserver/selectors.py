"""Label selectors in the string form list calls take (``labelSelector=a=b,c!=d,e,!f,g in (h,i)``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from tests.kubernetes.apiserver.errors import bad_request

Requirement = Callable[[Mapping[str, str]], bool]

# Commas separate requirements except inside the parentheses of a set.
_SPLIT = re.compile(r",(?![^()]*\))")
_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s,]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def _requirement(text: str) -> Requirement:
    if match := _SET.match(text):
        key, operator, values = match.group(1), match.group(2), {v.strip() for v in match.group(3).split(",")}
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQUALITY.match(text):
        key, operator, value = match.groups()
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(text):
        negated, key = match.group(1) == "!", match.group(2)
        return lambda labels: (key in labels) != negated
    raise bad_request(f'unable to parse requirement: found "{text}", expected: in, notin, =, ==, !=, gt, lt')


def parse_selector(selector: str | None) -> Callable[[Mapping[str, str]], bool]:
    """A predicate over a label map; an empty or missing selector matches everything."""
    if not selector or not selector.strip():
        return lambda labels: True
    requirements = [_requirement(part) for part in _SPLIT.split(selector) if part.strip()]
    return lambda labels: all(requirement(labels) for requirement in requirements)

"""App ids: unique, readable, and valid wherever a backend puts them.

An id is the app's name, cleaned to a character set and cut to a length, plus a random suffix.
The rules are named for where an id goes, and each backend takes the one it needs: local_cwd's
ids (and slurm's job directories) become file names; local_docker's container names and
hostnames; kubernetes' object names that must be DNS-1123 labels of at most 63 characters.
"""

from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass

SUFFIX_LENGTH = 8
_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class AppIdRules:
    kind: str
    """What an id of these rules is, for messages."""
    max_length: int
    """Of the whole id, suffix included."""
    pattern: str
    """The regular expression every id of this backend matches."""
    invalid: str
    """Characters outside the backend's set, as a regular expression class."""
    lowercase: bool = False
    first: str = "A-Za-z0-9"
    """Characters an id may start with (a regular expression class body)."""

    def matches(self, app_id: str) -> bool:
        return len(app_id) <= self.max_length and re.fullmatch(self.pattern, app_id) is not None


FILE_NAME_IDS = AppIdRules("a file name", 100, r"[A-Za-z0-9][A-Za-z0-9_.-]*", r"[^A-Za-z0-9_.-]+")
# Container names allow [a-zA-Z0-9][a-zA-Z0-9_.-]; hostnames ({app_id}-{role}-{replica}) are
# DNS labels, so leave room for the role and replica in 63 characters.
CONTAINER_NAME_IDS = AppIdRules("a container name and hostname", 40, r"[a-z0-9][a-z0-9-]*", r"[^a-z0-9-]+", lowercase=True, first="a-z0-9")
# RFC 1123 labels that also start with a letter (RFC 1035): valid for Services too. The id
# names the Service; Jobs are {app_id}-{role} and pod hostnames {job}-{index}, all DNS labels
# of at most 63 characters, so the id leaves room for a role and an index.
DNS_LABEL_IDS = AppIdRules("a DNS label", 40, r"[a-z]([a-z0-9-]*[a-z0-9])?", r"[^a-z0-9-]+", lowercase=True, first="a-z")


def new_app_id(name: str, rules: AppIdRules, suffix: str | None = None) -> str:
    """``{cleaned name}-{suffix}`` within ``rules``; a random suffix unless one is given."""
    if suffix is None:
        # os.urandom rather than secrets: the torchx CLI pays for every import on every call.
        suffix = "".join(_SUFFIX_ALPHABET[byte % len(_SUFFIX_ALPHABET)] for byte in os.urandom(SUFFIX_LENGTH))
    text = name.lower() if rules.lowercase else name
    text = re.sub(rules.invalid, "-", text)
    text = re.sub(f"^[^{rules.first}]+", "", text)
    text = text[: rules.max_length - len(suffix) - 1].rstrip("-_.")
    if not text:
        text = "app"
    app_id = f"{text}-{suffix}"
    if not rules.matches(app_id):
        raise ValueError(f"suffix {suffix!r} makes {app_id!r}, not an app id that is {rules.kind}")
    return app_id

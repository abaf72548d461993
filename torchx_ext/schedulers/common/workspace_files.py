"""Which files of a workspace travel with a job, by the ignore files' rules.

Ignore patterns are read as Docker reads ``.dockerignore`` (moby's patternmatcher): ``#``
comments at the start of a line, a leading ``/`` dropped, ``*`` and ``?`` within one path
segment, ``**`` across segments, ``[...]`` classes (``[^...]`` negates, ``[!...]`` does not),
``\\`` escapes, ``!`` re-includes, the last matching pattern wins, and a pattern that matches a
directory excludes everything under it. local_docker and kubernetes read ``.dockerignore`` then
``.torchxignore``; slurm reads ``.torchxignore`` only (as torchx's own slurm scheduler does).
Differences from ``docker build``: an exception can re-include a file under an excluded
directory even when it starts with a wildcard (``data`` then ``!*/keep``), as BuildKit does but
the classic CLI does not; empty directories, sockets and FIFOs are left out; symlinks are
kept as links, never followed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from torchx_ext.errors import InvalidArgumentError

IGNORE_FILES = (".dockerignore", ".torchxignore")
TORCHX_IGNORE = ".torchxignore"
WORKSPACE_FORMS = "a directory path or file://DIR (--workspace '' runs without a workspace)"
_Rule = tuple[bool, str, re.Pattern[str]]  # (exception, literal prefix, pattern)


def workspace_path(workspace: str, scheduler: str) -> Path:
    """The directory ``workspace`` names: torchx 0.7.0 passes ``file://DIR``, nightly a path."""
    text = str(workspace)
    scheme, separator, rest = text.partition("://")
    if separator:
        if scheme != "file":
            raise InvalidArgumentError(f"unsupported workspace {text!r}: {scheduler} takes {WORKSPACE_FORMS}")
        text = rest
    path = Path(text).expanduser()
    # Path("") is the current directory: an empty name is a mistake, not a request for it.
    if not text or not path.is_dir():
        raise InvalidArgumentError(f"workspace {workspace!r} is not a directory: give {WORKSPACE_FORMS}")
    return path.resolve()


def workspace_files(root: Path, ignore_files: tuple[str, ...] = IGNORE_FILES,
                    leave_out: Callable[[Path], bool] | None = None) -> list[str]:
    """The files (and symlinks) of the workspace that ``ignore_files`` (read in that order) do not
    exclude, as sorted relative POSIX paths; ``leave_out``: directories not walked at all. An
    unreadable directory or ignore file is one InvalidArgumentError naming it."""
    rules = _ignore_rules(root, ignore_files)
    found, pending = [], [""]
    while pending:
        prefix = pending.pop()
        try:
            with os.scandir(root / prefix) as entries:
                listed = list(entries)
        except OSError as error:
            raise unreadable(root, error) from None
        for entry in listed:
            relative = f"{prefix}{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                if not _skip_dir(relative, rules) and not (leave_out and leave_out(Path(entry.path))):
                    pending.append(f"{relative}/")
            # Sockets and FIFOs are left out: reading a FIFO for the hash would block.
            elif (entry.is_file(follow_symlinks=False) or entry.is_symlink()) and not _ignored(relative, rules):
                found.append(relative)
    return sorted(found)


def unreadable(root: Path, error: OSError) -> InvalidArgumentError:
    """A file of the workspace that cannot be read, said in one line with what to do."""
    name = error.filename or root
    return InvalidArgumentError(
        f"cannot read {name} of the workspace {root} ({error.strerror or error}): make it readable, exclude it in "
        f"{root / TORCHX_IGNORE}, or run without a workspace: --workspace ''")




def _ignore_rules(root: Path, ignore_files: tuple[str, ...]) -> list[_Rule]:
    rules = []
    for name in ignore_files:
        try:
            text = (root / name).read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as error:
            # Never built without it: what it excludes may be secrets.
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            raise InvalidArgumentError(f"cannot read {root / name} ({reason}): its exclusions would be lost; make it "
                                       "readable UTF-8 text") from None
        for line in text.splitlines():
            if line.startswith("#"):  # as Docker: only at the very start of a line
                continue
            pattern = line.strip()
            exception = pattern.startswith("!")
            pattern = pattern[1:].strip() if exception else pattern
            pattern = os.path.normpath(pattern).lstrip("/") if pattern else ""
            if pattern in ("", "."):
                continue
            try:
                rules.append((exception, *_compile(pattern)))
            except re.error as error:
                raise InvalidArgumentError(f"bad pattern {line.strip()!r} in {root / name}: {error}") from None
    return rules


def _compile(pattern: str) -> tuple[str, re.Pattern[str]]:
    """Docker's regex for ``pattern``, and the literal text that every match starts with."""
    out: list[str] = []
    index = 0
    special = re.search(r"[*?[\\]", pattern)
    literal = pattern if special is None else pattern[: special.start()]
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*" and pattern.startswith("*", index):
            slash = pattern.startswith("*/", index)
            index += 2 if slash else 1
            # `**` at the end takes everything, `**/` any whole segments (or none). A leading
            # `**x` with nothing special after it is a plain suffix match in Docker (".*x");
            # elsewhere Docker spans whole segments there too.
            suffix = not out and not re.search(r"[*?[\\]", pattern[index:])
            out.append(".*" if index >= len(pattern) or suffix and not slash else "(?:.*/)?")
        elif char in "*?":
            out.append("[^/]*" if char == "*" else "[^/]")
        elif char in "[]^-":
            out.append(char)  # classes ([a-z], [^a]) pass through to the regex, as in Docker
        elif char == "\\" and index < len(pattern):
            out.append(re.escape(pattern[index]))
            index += 1
        else:
            out.append(re.escape(char))
    return literal, re.compile("".join(out))


def _ignored(relative: str, rules: list[_Rule]) -> bool:
    # A path is matched as itself and as each of its parent directories.
    parts = relative.split("/")
    candidates = ["/".join(parts[: end + 1]) for end in range(len(parts))]
    excluded = False
    for exception, _, pattern in rules:
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            excluded = not exception
    return excluded


def _skip_dir(relative: str, rules: list[_Rule]) -> bool:
    # An excluded directory is not walked unless an exception could match below it: its
    # matches all start with its literal prefix, which must then agree with "relative/".
    if not _ignored(relative, rules):
        return False
    below = f"{relative}/"
    return not any(exception and (below.startswith(literal) or literal.startswith(below))
                   for exception, literal, _ in rules)

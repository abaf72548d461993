"""Records on disk that readers in other processes (and on other nodes) read while they change,
and where a backend keeps them (its state root)."""

from __future__ import annotations

import os
import time
from pathlib import Path

FILE_MODE = 0o600
"""The user's logs, env values (API keys) and commands are nobody else's."""
DIR_MODE = 0o700


def write_atomically(path: Path, text: str, mode: int = FILE_MODE) -> None:
    # Readers in other processes see the old content or the new, never half of it.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def state_root(env: str, backend: str) -> Path:
    """Where ``backend`` keeps its registry (and, by default, its jobs): ``$env``, else
    ``$XDG_STATE_HOME/torchx_ext/{backend}`` (``~/.local/state`` without it)."""
    explicit = os.environ.get(env)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "torchx_ext" / backend

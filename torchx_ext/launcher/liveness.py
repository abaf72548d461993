"""A replica's sign of life for its scheduler: a file the launcher touches every second.

A frozen or hung host makes no process exit, so a scheduler that only waits for exits keeps a
frozen replica forever. Where a scheduler sets ``TORCHX_EXT_LIVENESS_FILE`` (replica_env), the
launcher touches that file from its first moment, before it imports torch, on a thread of its
own: neither a long training step nor a slow start delays it, only a frozen or hung launcher.
The scheduler then judges the file's age with its own means: local_cwd's supervisor reads it,
a Docker HEALTHCHECK or a Kubernetes livenessProbe runs

    python -m torchx_ext.launcher.liveness PATH MAX_AGE_S

which exits 0 while the file is younger than MAX_AGE_S seconds and 1 otherwise (saying why).
Standard library only: probes run it every few seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time

INTERVAL_S = 1.0
DEFAULT_MAX_AGE_S = 10.0
"""A replica whose file is older than this is frozen: ten missed touches."""


def probe_command(path: str, max_age_s: float = DEFAULT_MAX_AGE_S, python: str = "python") -> list[str]:
    """The argv of a probe (Docker HEALTHCHECK, Kubernetes livenessProbe) judging ``path``."""
    return [python, "-m", "torchx_ext.launcher.liveness", path, f"{max_age_s:g}"]


def runs_our_launcher(args: list[str]) -> bool:
    """Whether a role's arguments start our launcher, which touches the liveness file: a probe on
    any other program would find no file and call a healthy replica frozen."""
    return any(first == "-m" and second == "torchx_ext.launcher" for first, second in zip(args, args[1:]))


def start_touching(path: str) -> None:
    """Touch ``path`` now and then every second, for as long as this process lives."""
    _touch(path)

    def touch_forever() -> None:
        while True:
            time.sleep(INTERVAL_S)
            _touch(path)

    threading.Thread(target=touch_forever, name="torchx_ext: liveness", daemon=True).start()


def age_s(path: str, now: float | None = None) -> float | None:
    """Seconds since ``path`` was last touched; None when it does not exist."""
    try:
        touched = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - touched)


def _touch(path: str) -> None:
    try:
        with open(path, "a"):
            pass
        os.utime(path)
    except OSError:
        pass  # a full or read-only disk is not a frozen launcher: the file just ages


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m torchx_ext.launcher.liveness PATH MAX_AGE_S", file=sys.stderr)
        return 2
    path, limit = args[0], float(args[1])
    age = age_s(path)
    if age is None:
        print(f"{path} does not exist: the launcher has not started", file=sys.stderr)
        return 1
    if age > limit:
        print(f"the launcher last touched {path} {age:.1f} s ago (more than {limit:g} s): frozen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

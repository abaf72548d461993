"""Every error torchx_ext raises on purpose.

Messages say what was wrong and what the valid forms are, so a CLI can print
``str(error)`` and exit without a traceback.
"""


def first_line(error: BaseException) -> str:
    """An error's first non-empty line (torch's C++ errors go on with a stack), else its type's name."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


class TorchxExtError(Exception):
    """Base class: catch this to handle any deliberate torchx_ext failure."""


class InvalidArgumentError(TorchxExtError, ValueError):
    """A value given by the user (flag, env var, parameter) is malformed or out of range."""


class TopologyError(TorchxExtError):
    """The machine's topology could not be read from sysfs."""


class BindingFallbackError(TorchxExtError):
    """A binding plan needed a fallback and ``strict`` forbids fallbacks."""


class BindingError(TorchxExtError):
    """The kernel refused to apply a CPU affinity."""


class StateTransitionError(TorchxExtError):
    """A job or replica was asked to move between states that do not follow each other."""


class JobRecordError(TorchxExtError):
    """A scheduler's record of a job (on disk, in labels) cannot be read: another format
    version, a missing or unknown key, or garbage."""


class WorkerFailedError(TorchxExtError):
    """A launched worker raised or exited non-zero after all restarts; names the first failure."""

    def __init__(self, rank: int, local_rank: int, exitcode: int, traceback: str, summary: str) -> None:
        super().__init__(
            f"rank {rank} (local rank {local_rank}) failed with exit code {exitcode}:\n{traceback}"
        )
        self.rank = rank
        self.local_rank = local_rank
        self.exitcode = exitcode
        self.traceback = traceback
        self.summary = summary


class EngineError(TorchxExtError):
    """A container engine could not be reached, or refused what it was asked to do; the
    message says which engine (``DOCKER_HOST``, socket) and what to do about it."""


class KubernetesError(TorchxExtError):
    """The Kubernetes API server could not be reached, or refused a request; the message says
    which server or object and what to do about it."""

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status of the API's answer; None when there was none."""
        self.reason = reason
        """The API's machine-readable reason (NotFound, AlreadyExists, ...)."""

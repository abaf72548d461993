"""How our torchx commands end on an error: one ``torchx: error:`` line and an exit code from
``torchx_ext.exit_codes``, with no traceback unless ``TORCHX_EXT_DEBUG=1`` asks for it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from torchx_ext import exit_codes
from torchx_ext.errors import InvalidArgumentError, TorchxExtError

DEBUG_ENV = "TORCHX_EXT_DEBUG"
"""Set to 1 for tracebacks instead of one-line errors."""


def fail(message: str, code: int) -> NoReturn:
    print(f"torchx: error: {message}", file=sys.stderr)
    sys.exit(code)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Our deliberate errors as one line: a value refused (BAD_INPUT), anything else, such as an
    engine or cluster that does not answer (FAILED); a closed output pipe, quietly."""
    try:
        yield
    except BrokenPipeError:
        # The reader went away (`torchx list | head`): leave quietly, as Python's docs advise,
        # without the second error flushing stdout at exit would raise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(exit_codes.FAILED)
    except TorchxExtError as error:
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        fail(str(error), exit_codes.BAD_INPUT if isinstance(error, InvalidArgumentError) else exit_codes.FAILED)

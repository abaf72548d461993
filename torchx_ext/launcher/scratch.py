"""The log directory of a launch whose caller names none.

torchelastic would make a temporary directory for its per-attempt files (error files, redirected
worker output) and never remove it. Here such a launch gets a directory of ours: removed when the
launch ends if nothing worth keeping is in it (error files are read before the launch returns),
kept, and said where, when worker output is redirected into it.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger("torchx_ext.launcher")


@contextmanager
def log_dir_of_launch(log_dir: str | None, redirects: Any) -> Iterator[str]:
    """``log_dir`` itself when given; else a temporary directory, removed at the end unless
    ``redirects`` (a Std or {local_rank: Std}, as LogsSpecs takes it) sends output to files."""
    if log_dir is not None:
        yield log_dir
        return
    made = tempfile.mkdtemp(prefix="torchelastic_")
    if _redirects_output(redirects):
        logger.info("redirected worker output goes to files under %s (kept; --log-dir chooses the directory)", made)
        yield made
        return
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _redirects_output(redirects: Any) -> bool:
    from torch.distributed.elastic.multiprocessing import Std

    values = redirects.values() if isinstance(redirects, dict) else [redirects]
    return any(value != Std.NONE for value in values)

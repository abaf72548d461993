"""Cleans up when told to stop, as a job that saves a checkpoint on SIGTERM does:
``graceful.py DIR CLEANUP_S``. It says that it runs, then sleeps; on SIGTERM it leaves
``DIR/sigterm.RANK``, spends CLEANUP_S seconds cleaning up, leaves ``DIR/cleaned.RANK`` and exits 0."""

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Optional

directory, cleanup_s = Path(sys.argv[1]), float(sys.argv[2])
rank = os.environ["RANK"]


def on_sigterm(signum: int, frame: Optional[FrameType]) -> None:
    (directory / f"sigterm.{rank}").write_text(str(time.time()))
    time.sleep(cleanup_s)
    (directory / f"cleaned.{rank}").write_text(str(time.time()))
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
print(f"running rank {rank} pid {os.getpid()}", flush=True)
time.sleep(3600)

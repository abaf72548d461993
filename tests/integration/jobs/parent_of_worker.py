"""Prints this worker's parent's command line (a preloaded worker's parent is the launcher's fork)."""

import os
from pathlib import Path

parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
print(f"parent: {parent}", flush=True)

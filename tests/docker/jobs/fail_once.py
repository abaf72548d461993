"""Fails (exit 3) on its container's first run, succeeds on the next: the container's own
filesystem survives a restart of the container."""

import os
import sys

MARKER = "/tmp/fail_once.marker"
if not os.path.exists(MARKER):
    open(MARKER, "w").close()
    print("first attempt: failing", flush=True)
    sys.exit(3)
print("second attempt: succeeding", flush=True)

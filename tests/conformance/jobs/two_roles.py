"""One role of an app that knows nothing of elastic training: ``trainer`` waits for ``reader`` to
finish, ``reader`` fails on its first start and succeeds on the next. Each start is counted in
DIR/ROLE.starts, so a test tells what a failure restarted (the reader only, or both roles)."""

import sys
import time
from pathlib import Path

role, directory = sys.argv[1], Path(sys.argv[2])
with open(directory / f"{role}.starts", "a") as starts:
    starts.write("start\n")
count = len((directory / f"{role}.starts").read_text().splitlines())
print(f"{role} start {count}", flush=True)
if role == "reader":
    time.sleep(1)
    if count == 1:
        sys.exit(3)
    (directory / "reader.done").touch()
    sys.exit(0)
deadline = time.monotonic() + 60
while not (directory / "reader.done").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
sys.exit(0 if (directory / "reader.done").exists() else 4)

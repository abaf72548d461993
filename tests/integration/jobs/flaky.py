"""Exits 3 the first time it runs (it leaves ARGV[1] behind), succeeds after that."""

import sys
from pathlib import Path

marker = Path(sys.argv[1])
if not marker.exists():
    marker.write_text("ran once")
    print("failing on purpose", file=sys.stderr, flush=True)
    sys.exit(3)
print("second attempt succeeded", flush=True)

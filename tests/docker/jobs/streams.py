"""Ten numbered lines on stdout, one second apart for the first three, and ARGV[1] on stderr."""

import sys
import time

print(f"ERR {sys.argv[1]}", file=sys.stderr, flush=True)
for index in range(10):
    print(f"OUT line {index}", flush=True)
    if index < 3:
        time.sleep(1)

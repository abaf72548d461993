"""Prints 'early' lines on stdout and stderr, waits ARGV[1] seconds, then prints 'late' ones."""

import sys
import time

for index in range(3):
    print(f"early out {index}", flush=True)
    print(f"early err {index}", file=sys.stderr, flush=True)
time.sleep(float(sys.argv[1]))
for index in range(3):
    print(f"late out {index}", flush=True)
    print(f"late err {index}", file=sys.stderr, flush=True)

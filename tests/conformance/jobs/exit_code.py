"""Rank ARGV[1] prints the time and exits with code ARGV[2] after a second; the others wait forever
(as ranks blocked in a collective with a dead peer would)."""

import os
import sys
import time

if os.environ["RANK"] == sys.argv[1]:
    time.sleep(1)
    print(f"exiting at {time.time():.3f}", flush=True)
    sys.exit(int(sys.argv[2]))
print("waiting", flush=True)
time.sleep(3600)

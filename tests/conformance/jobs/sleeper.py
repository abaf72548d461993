"""Reports that it runs, then sleeps until stopped (and shrugs off SIGTERM when ARGV[1] says so)."""

import os
import signal
import sys
import time

if sys.argv[1:] == ["ignore-sigterm"]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"running rank {os.environ['RANK']} pid {os.getpid()}", flush=True)
time.sleep(3600)

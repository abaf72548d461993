"""Prints the CPUs this worker may run on."""

import os

print(f"replica {os.environ['GROUP_RANK']} cpus {sorted(os.sched_getaffinity(0))}", flush=True)

"""Prints this worker's rank and the CPUs it may run on, as JSON."""

import json
import os

print("AFFINITY " + json.dumps({"rank": int(os.environ["RANK"]), "cpus": sorted(os.sched_getaffinity(0))}), flush=True)

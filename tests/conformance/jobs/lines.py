"""Prints ARGV[1] numbered lines on stdout, tagged with this worker's global rank."""

import os
import sys

rank = os.environ["RANK"]
count = int(sys.argv[1])
out = sys.stdout
for start in range(0, count, 1000):
    out.write("".join(f"rank {rank} line {index}\n" for index in range(start, min(start + 1000, count))))
out.flush()

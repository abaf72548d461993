"""Writes this worker's sys.argv[2:] as JSON to OUTDIR/argv<RANK>.json (OUTDIR = sys.argv[1])."""

import json
import os
import sys

with open(os.path.join(sys.argv[1], f"argv{os.environ['RANK']}.json"), "w", encoding="utf-8") as handle:
    json.dump(sys.argv[2:], handle)

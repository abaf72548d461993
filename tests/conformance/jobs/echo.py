"""Rank 0 prints its arguments and the ECHO_* environment as one JSON line."""

import json
import os
import sys

if os.environ["RANK"] == "0":
    env = {key: value for key, value in os.environ.items() if key.startswith("ECHO_")}
    print("ECHO " + json.dumps({"argv": sys.argv[1:], "env": env}), flush=True)

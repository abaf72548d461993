"""Says who a rank runs as: its user id, whether it may gain privileges, its effective capabilities."""

import os
from pathlib import Path

status = dict(line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line)
print(f"rank {os.environ['RANK']}: uid {os.getuid()} no_new_privs {status.get('NoNewPrivs', '?').strip()} "
      f"CapEff {status.get('CapEff', '?').strip()}", flush=True)

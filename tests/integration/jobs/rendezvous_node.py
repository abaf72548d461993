"""One rendezvous node: ARGV kind port min max settings-json. Says "ready", joins, says "joined
RANK WORLD_SIZE", then waits to be killed, as a training node would."""

import json
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))

from tests.integration.rendezvous_nodes import make_handler  # noqa: E402

kind, port, min_nodes, max_nodes, settings = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
handler = make_handler(kind, port, min_nodes, max_nodes, **json.loads(settings))
print("ready", flush=True)
info = handler.next_rendezvous()
print(f"joined {info.rank} {info.world_size}", flush=True)
while True:
    time.sleep(60)

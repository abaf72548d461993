"""One rendezvous node: ARGV kind port min max settings-json. Says "ready", joins, says "joined
RANK WORLD_SIZE", then, as a torch agent would, asks every second whether nodes wait and, if
so, says "restart" and rendezvouses again ("joined ..."), until it is killed.
TORCHX_EXT_TEST_CLOCK_OFFSET sets its wall clocks off, as the launcher's."""

import json
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))

from tests.integration.rendezvous_nodes import make_handler  # noqa: E402
from torchx_ext.launcher.rendezvous.clock_offset import apply_clock_offset  # noqa: E402

apply_clock_offset()

kind, port, min_nodes, max_nodes, settings = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
handler = make_handler(kind, port, min_nodes, max_nodes, **json.loads(settings))
print("ready", flush=True)
while True:
    info = handler.next_rendezvous()
    print(f"joined {info.rank} {info.world_size}", flush=True)
    while handler.num_nodes_waiting() == 0:
        time.sleep(1)
    print("restart", flush=True)

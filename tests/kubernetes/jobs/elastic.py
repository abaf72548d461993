"""An elastic (-j 1:2) worker for the elastic proof: every step all-reduces a one and prints the
world it ran in. Alone it keeps going, so that the second node's arrival (its agent sees a node
waiting and re-rendezvouses) is what moves it on. The first pod of replica 1 stops its own
launcher (the pod's first process) after a few steps with two nodes (a pod failing mid-run: the Job replaces it); with two
nodes and nothing left to fail, both finish."""

import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

STATE = Path(sys.argv[1])
index = int(os.environ["JOB_COMPLETION_INDEX"])
dist.init_process_group("gloo")
world = dist.get_world_size()
first_pod_of_1 = index == 1 and not (STATE / "replica-1-failed").exists()
step = 0
while True:
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"replica {index} step {step} world {world} sum {int(total.item())}", flush=True)
    step += 1
    time.sleep(0.5)
    if world == 2 and first_pod_of_1 and step == 6:
        (STATE / "replica-1-failed").write_text("once")
        print(f"replica {index} stops its pod mid-run", flush=True)
        os.kill(1, signal.SIGTERM)  # the pod's launcher (its first process): the whole pod fails
        time.sleep(30)
    if world == 2 and not first_pod_of_1 and step == 8:
        break
dist.destroy_process_group()
print(f"replica {index} finished world {world}", flush=True)

"""A training loop whose ranks meet each step through the workers' store, not in a gloo collective:
``store_stepped.py DIR STEPS STEP_S FAIL_RANK FAIL_STEP [always]``. As NCCL over InfiniBand, or a rank busy
outside a collective, a survivor does not notice a peer that died: it waits for it at the next
step. Only the rendezvous can tell it (torch's contract: the failed node rendezvouses again, the
others see it waiting and restart their workers).

Rank FAIL_RANK raises once at step FAIL_STEP, as an out-of-memory error would (it leaves
``DIR/failed_at`` behind: the time it failed); with ``always``, at FAIL_STEP of every attempt, as
a bad record at that step would. Rank 0 checkpoints every step to
``DIR/checkpoint.json`` (the steps committed, the world size of each and when it ended); a
restarted attempt resumes from it.
"""

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store


def main() -> None:
    directory, steps, step_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    fail_rank, fail_step = int(sys.argv[4]), int(sys.argv[5])
    always = sys.argv[6:] == ["always"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = _get_default_store()  # this attempt's keys: torch prefixes the workers' store per attempt
    checkpoint = directory / "checkpoint.json"
    saved: dict[str, Any] = json.loads(checkpoint.read_text()) if checkpoint.exists() else {"history": []}
    history: list[list[float]] = saved["history"]
    print(f"rank {rank}/{world} resumes at step {len(history)}", flush=True)
    failed_at = directory / "failed_at"
    for step in range(len(history), steps):
        time.sleep(step_s)
        if rank == fail_rank and step == fail_step and (always or not failed_at.exists()):
            failed_at.write_text(str(time.time()))
            raise RuntimeError(f"rank {rank} failed at step {step}{'' if always else ', once'} (as an out-of-memory "
                               "error would)")
        if int(store.add(f"step.{step}", 1)) == world:
            store.set(f"step.{step}.done", "")
        store.wait([f"step.{step}.done"], timedelta(minutes=10))  # NCCL's default timeout
        history.append([step, world, time.time()])
        if rank == 0:
            partial = directory / f".checkpoint.{os.getpid()}"
            partial.write_text(json.dumps({"history": history}))
            os.replace(partial, checkpoint)
        print(f"step {step} world {world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

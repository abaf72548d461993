"""A training loop that checkpoints every step, for the fault tests: ``checkpointed.py DIR STEPS STEP_S``.

The state is one number that every step raises by exactly 1 through an all-reduce (whatever the
world size), so a step done twice or skipped shows in it. Rank 0 writes ``DIR/checkpoint.json``
atomically after each step: the state, and every step committed so far with the world size it
ran at and when it ended. A restarted attempt resumes from it. Each rank prints ``step K world W`` as it finishes.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def main() -> None:
    directory, steps, step_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    checkpoint = directory / "checkpoint.json"
    saved: dict[str, Any] = json.loads(checkpoint.read_text()) if checkpoint.exists() else {"state": 0.0, "history": []}
    state = torch.tensor([saved["state"]], dtype=torch.float64)
    dist.broadcast(state, 0)  # every rank starts from rank 0's view of the checkpoint
    history: list[list[float]] = saved["history"]
    first = len(history)
    print(f"rank {rank}/{world} resumes at step {first}", flush=True)
    for step in range(first, steps):
        time.sleep(step_s)
        increment = torch.tensor([1.0 / world], dtype=torch.float64)
        dist.all_reduce(increment)
        state += increment
        history.append([step, world, time.time()])
        if rank == 0:
            partial = directory / f".checkpoint.{os.getpid()}"
            partial.write_text(json.dumps({"state": state.item(), "history": history}))
            os.replace(partial, checkpoint)
        print(f"step {step} world {world}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

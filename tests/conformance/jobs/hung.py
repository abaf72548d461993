"""A training loop one rank of which hangs, alive: ``hung.py DIR STEPS STEP_S HANG_RANK HANG_STEP [TIMER_S [always]]``.

As checkpointed.py (rank 0 checkpoints every step to ``DIR/checkpoint.json``; a restarted attempt
resumes from it), except that rank HANG_RANK, at step HANG_STEP of the first attempt that gets
there, leaves ``DIR/hung_at`` (the time) and then waits for ever outside any collective, as a
deadlock or a data loader that never returns does: alive, its launcher healthy, its peers waiting
in the step's all-reduce. With HANG_STEP -1 no rank hangs. With TIMER_S (not 0) every step runs
inside torch's ``expires(after=TIMER_S)``, its client on ``$TORCHELASTIC_TIMER_FILE``. With
``always`` the rank hangs at HANG_STEP in every attempt, as a bug in the data at that step would;
with ``fails`` it raises there instead, in every attempt; with ``fails-slowly`` it raises and then
takes 5 s to exit (an exit handler that flushes a checkpoint or joins data-loader processes).
"""

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

SLOW_EXIT_S = 5.0


def main() -> None:
    directory, steps, step_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    hang_rank, hang_step = int(sys.argv[4]), int(sys.argv[5])
    timer_s = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    always, fails = sys.argv[7:] == ["always"], sys.argv[7:] in (["fails"], ["fails-slowly"])
    if timer_s:
        from torch.distributed.elastic import timer

        timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    checkpoint = directory / "checkpoint.json"
    saved: dict[str, Any] = json.loads(checkpoint.read_text()) if checkpoint.exists() else {"state": 0.0, "history": []}
    state = torch.tensor([saved["state"]], dtype=torch.float64)
    dist.broadcast(state, 0)
    history: list[list[float]] = saved["history"]
    print(f"rank {rank}/{world} resumes at step {len(history)}", flush=True)
    hung_at = directory / "hung_at"
    for step in range(len(history), steps):
        with timer.expires(after=timer_s) if timer_s else contextlib.nullcontext():
            time.sleep(step_s)
            if rank == hang_rank and step == hang_step and fails:
                print(f"rank {rank} fails at step {step}", flush=True)
                if sys.argv[7:] == ["fails-slowly"]:
                    atexit.register(time.sleep, SLOW_EXIT_S)
                raise ValueError(f"bad batch at step {step}")
            if rank == hang_rank and step == hang_step and (always or not hung_at.exists()):
                hung_at.write_text(str(time.time()))
                print(f"rank {rank} hangs at step {step}", flush=True)
                threading.Event().wait()
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

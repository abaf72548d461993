"""Healthy jobs that a hang watchdog could mistake for hung ones: ``quiet_ranks.py CASE ...``.

- ``jitter STEPS MEDIAN_S``: every rank sleeps a jittered time per step (up to 5x the median,
  rank by rank), then all-reduces: fast steps, slow steps, ranks waiting on each other.
- ``python_work SECONDS``: rank 0 does SECONDS of pure Python work (as a dataset pass or a
  checkpoint written in Python) while every other rank waits in a barrier.
- ``timed_sleep SECONDS TIMER_S``: every rank sleeps SECONDS in one C call, inside torch's
  ``expires(after=TIMER_S)``: a step the worker timed itself.
- ``one_call_site SECONDS``: every rank multiplies a matrix over and over from one line for SECONDS
  (as a loop that replays a CUDA graph and waits for it does): a sampler finds each rank at the
  same call every time.

Each rank prints ``done`` at the end.
"""

import os
import random
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    case, *args = sys.argv[1:]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if case == "jitter":
        steps, median = int(args[0]), float(args[1])
        jitter = random.Random(rank)
        for _ in range(steps):
            time.sleep(median * (5 if jitter.random() < 0.05 else jitter.uniform(0.5, 1.5)))
            dist.all_reduce(torch.ones(1))
    elif case == "python_work":
        if rank == 0:
            until, total = time.monotonic() + float(args[0]), 0
            while time.monotonic() < until:
                total += sum(index * index for index in range(1000))
        dist.barrier()
    elif case == "one_call_site":
        until, product = time.monotonic() + float(args[0]), torch.randn(200, 200)
        while time.monotonic() < until:
            product = torch.mm(product, product).clamp_(-1, 1)
        dist.barrier()
    elif case == "timed_sleep":
        from torch.distributed.elastic import timer

        timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
        with timer.expires(after=float(args[1])):
            time.sleep(float(args[0]))
        dist.barrier()
    else:
        raise SystemExit(f"unknown case {case!r}")
    print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

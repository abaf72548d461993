"""A worker that starts a process of its own with the forkserver method (as a DataLoader with
multiprocessing_context="forkserver" does) and writes what that process computed."""

import multiprocessing
import os
import sys


def square(value: int, results: "multiprocessing.Queue[int]") -> None:
    results.put(value * value)


if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    results = context.Queue()
    rank = int(os.environ["LOCAL_RANK"])
    child = context.Process(target=square, args=(rank + 2, results))
    child.start()
    computed = results.get(timeout=60)
    child.join(60)
    with open(os.path.join(sys.argv[1], f"own{rank}.txt"), "w") as out:
        out.write(str(computed))

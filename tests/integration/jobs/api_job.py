"""Runs torchx_ext.launcher.launch for a callable and prints the results as JSON.

Usage: api_job.py START_METHOD MODE [fail]
"""

import json
import os
import sys
import threading

# Under spawn every worker runs this module's top level again before anything else.
IMPORT_AFFINITY = sorted(os.sched_getaffinity(0))

from torchx_ext.errors import TorchxExtError  # noqa: E402
from torchx_ext.launcher import launch  # noqa: E402
from torchx_ext.launcher.api import WorkerFailedError  # noqa: E402


def report(tag: str) -> dict[str, object]:
    first = sorted(os.sched_getaffinity(0))
    seen: list[list[int]] = []
    thread = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
    thread.start()
    thread.join()
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    return {
        "tag": tag,
        "import_affinity": IMPORT_AFFINITY,
        "first_affinity": first,
        "thread_affinity": seen[0],
        "torchx_ext_cpus": os.environ.get("TORCHX_EXT_CPUS"),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
        "sum": value.item(),
    }


def fail_on_rank_one() -> int:
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is broken")
    return 0


if __name__ == "__main__":
    start_method, mode = sys.argv[1], sys.argv[2]
    try:
        if sys.argv[3:] == ["fail"]:
            launch(fail_on_rank_one, nproc_per_node=2, numa_binding=mode, start_method=start_method)
        else:
            results = launch(report, "a $x $$ ${local_rank}", nproc_per_node=2, numa_binding=mode,
                             start_method=start_method, omp_threads="auto")
            print(json.dumps({str(rank): value for rank, value in results.items()}))
            print(json.dumps({"parent_after": sorted(os.sched_getaffinity(0))}))
    except WorkerFailedError as error:
        print(json.dumps({"failed_rank": error.rank, "exitcode": error.exitcode, "traceback": error.traceback}))
    except TorchxExtError as error:
        print(json.dumps({"error": str(error)}))

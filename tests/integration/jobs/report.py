"""A worker that reports, from its first line, what binding it runs under, then all-reduces.

Usage: report.py OUTDIR [ARGS...]; writes OUTDIR/rank<RANK>.json. Environment knobs:
REPORT_FAIL_ON_FIRST_ATTEMPT=<rank> exits 3 from that rank before the first restart;
REPORT_FAIL_ALWAYS=<rank> exits 7 from that rank; REPORT_SLEEP=<seconds> sleeps before exiting;
REPORT_IGNORE_SIGTERM=1 ignores SIGTERM (so only SIGKILL ends it).
"""

import os
import sys
import threading

FIRST_AFFINITY = sorted(os.sched_getaffinity(0))
THREAD_AFFINITY: list[list[int]] = []
_thread = threading.Thread(target=lambda: THREAD_AFFINITY.append(sorted(os.sched_getaffinity(0))))
_thread.start()
_thread.join()

import json  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main() -> None:
    if os.environ.get("REPORT_IGNORE_SIGTERM") == "1":
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out_dir = sys.argv[1]
    rank = int(os.environ["RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    with open(os.path.join(out_dir, f"pid{rank}.{os.getpid()}"), "w"):
        pass
    if os.environ.get("REPORT_FAIL_ON_FIRST_ATTEMPT") == str(rank) and restart == 0:
        sys.exit(3)
    if os.environ.get("REPORT_FAIL_ALWAYS") == str(rank):
        print(f"rank {rank} fails on purpose", file=sys.stderr, flush=True)
        sys.exit(7)
    dist.init_process_group("gloo")
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    report = {
        "rank": rank,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "first_affinity": FIRST_AFFINITY,
        "thread_affinity": THREAD_AFFINITY[0],
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torchx_ext_cpus": os.environ.get("TORCHX_EXT_CPUS"),
        "torchx_ext_numa_node": os.environ.get("TORCHX_EXT_NUMA_NODE"),
        "sum": value.item(),
        "argv": sys.argv[2:],
        "argv0": sys.argv[0],
        "name": __name__,
        "file": __file__,
        "restart": restart,
        "group_rank": int(os.environ["GROUP_RANK"]),
        "node_tag": os.environ.get("REPORT_NODE_TAG"),
        "replica": os.environ.get("TORCHX_EXT_REPLICA"),
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
        json.dump(report, handle)
    time.sleep(float(os.environ.get("REPORT_SLEEP", "0")))


if __name__ == "__main__":
    main()

"""A worker that says which GPU and CPUs it got: ``rank R local L visible V cpus C affinity A``."""

import os

print(f"rank {os.environ['RANK']} local {os.environ['LOCAL_RANK']} visible {os.environ.get('CUDA_VISIBLE_DEVICES')} "
      f"cpus {os.environ.get('TORCHX_EXT_CPUS')} affinity {sorted(os.sched_getaffinity(0))}", flush=True)

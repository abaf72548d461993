"""Every rank joins the gloo group and sums its rank; rank 0 prints the sum."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank()])
dist.all_reduce(total)
assert int(total) == sum(range(dist.get_world_size())), int(total)
if dist.get_rank() == 0:
    print(f"allreduce ok: {int(total)}", flush=True)
dist.destroy_process_group()

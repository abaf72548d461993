"""A small DDP training job that runs anywhere: gloo on CPUs, NCCL when there are GPUs.

Every rank prints the CPUs it runs on (and what torchx_ext's launcher planned for it), then
trains a small MLP on synthetic data; rank 0 prints throughput and one success line.

    torchx run -s local_cwd dist.ddp -j 2x2 --script examples/train.py -- --steps 30
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    print(
        f"rank {rank}/{world} (local {local_rank}, replica {os.environ.get('GROUP_RANK', '?')}): "
        f"cpus={sorted(os.sched_getaffinity(0))} planned={os.environ.get('TORCHX_EXT_CPUS', '-')} "
        f"numa_node={os.environ.get('TORCHX_EXT_NUMA_NODE') or '-'} "
        f"omp_threads={os.environ.get('OMP_NUM_THREADS', '-')} torch_threads={torch.get_num_threads()} "
        f"device={device}",
        flush=True,
    )

    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(32, args.width), nn.ReLU(), nn.Linear(args.width, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    target_weights = torch.linspace(-1, 1, 32, device=device)
    start = time.perf_counter()
    loss = torch.zeros((), device=device)
    for _ in range(args.steps):
        inputs = torch.randn(args.batch, 32, device=device)
        targets = (inputs @ target_weights).unsqueeze(1)
        loss = nn.functional.mse_loss(ddp(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - start

    # Every rank must end with identical weights: DDP all-reduced the gradients.
    checksum = sum(parameter.detach().double().sum() for parameter in model.parameters())
    checksums = [torch.zeros((), dtype=torch.float64, device=device) for _ in range(world)]
    dist.all_gather(checksums, checksum.to(torch.float64))
    in_sync = all(torch.isclose(value, checksums[0]) for value in checksums)
    samples = torch.tensor([args.steps * args.batch / elapsed], device=device)
    dist.all_reduce(samples)
    ranks_sum = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(ranks_sum)
    expected_sum = world * (world + 1) // 2
    if rank == 0:
        status = "weights in sync on every rank" if in_sync else "WEIGHTS DIFFER BETWEEN RANKS"
        print(
            f"train.py: {world} ranks finished {args.steps} steps, loss {loss.item():.4f}, "
            f"{samples.item():.0f} samples/s in total, all-reduce of ranks 1..{world} = "
            f"{ranks_sum.item():.0f} (expected {expected_sum}), {status}",
            flush=True,
        )
    dist.destroy_process_group()
    if not in_sync or ranks_sum.item() != expected_sum:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

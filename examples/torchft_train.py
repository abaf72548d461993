"""A torchft training script for ``dist.hsdp``, as torchft's own examples write one, small enough for CPUs.

    torchx run -s local_cwd dist.hsdp --replicas 2 --script examples/torchft_train.py -- --steps 200

Each replica group trains the same small model on its own data; torchft's manager averages the
gradients over the groups that are live at this step (the lighthouse says which) and commits the
step only where every group's all-reduce went through. A group that comes back copies the weights
of a live one instead of loading a checkpoint.

The gradients go through ``manager.allreduce``, which turns a lost peer's error into an
uncommitted step. torchft's ``DistributedDataParallel`` hook asserts instead when gloo reports the
lost peer's connection reset during the all-reduce (torchft 0.2.0, ``assert fut._fut``), which ends
the survivor too. Every committed step prints one line: the group, the step, how many groups took
part and a hash of the weights, which is the same on every group at the same step.
"""

import argparse
import hashlib
import os
import time
from datetime import timedelta

import torch
from torch import nn, optim
from torchft import Manager, Optimizer, ProcessGroupGloo


def weights_hash(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(bytes(tensor.detach().cpu().contiguous().untyped_storage()))
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100, help="train until this step is committed")
    parser.add_argument("--step-time", type=float, default=0.1, help="seconds of 'work' per step")
    args = parser.parse_args()
    group = int(os.environ.get("REPLICA_GROUP_ID", 0))

    torch.manual_seed(0)  # every group starts from the same weights
    model = nn.Linear(16, 16)
    inner = optim.SGD(model.parameters(), lr=0.01)

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state: dict) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=5)),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"group_{group}",
        timeout=timedelta(seconds=10),
    )
    optimizer = Optimizer(manager, inner)
    print(f"[torchft-example] group {group} pid {os.getpid()} starts at step {manager.current_step()}", flush=True)
    data = torch.Generator().manual_seed(1000 + group)
    while manager.current_step() < args.steps:
        optimizer.zero_grad()  # starts this step's quorum
        inputs = torch.randn(8, 16, generator=data)
        loss = (model(inputs) - inputs).pow(2).mean()
        loss.backward()
        works = [manager.allreduce(param.grad) for param in model.parameters()]
        for work in works:
            work.wait()
        time.sleep(args.step_time)
        step = manager.current_step()
        optimizer.step()  # commits where every group's all-reduce went through
        if manager.current_step() > step:
            print(f"[torchft-example] group {group} committed step {manager.current_step()} participants "
                  f"{manager.num_participants()} weights {weights_hash(model)}", flush=True)
    manager.shutdown(wait=False)
    print(f"[torchft-example] group {group} done at step {manager.current_step()}", flush=True)


if __name__ == "__main__":
    main()

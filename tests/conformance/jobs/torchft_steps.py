"""A torchft training loop the fault tests steer through files: ``torchft_steps.py DIR [STEP_S]``.

Each step appends a line to ``DIR/group{G}.jsonl`` (the step, whether it was committed, how many
groups took part, a hash of the weights, and this worker's start token, new at every start), so the
test sees every group's progress on its own clock as the lines arrive. ``DIR/kill-group{G}``: that group's worker
removes it and SIGKILLs itself (once per file). ``DIR/stop``: every group ends after its next
committed step. The gradients go through ``manager.allreduce``, as examples/torchft_train.py says why.
"""

import hashlib
import json
import os
import signal
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn, optim
from torchft import Manager, Optimizer, ProcessGroupGloo


def main() -> None:
    directory = Path(sys.argv[1])
    step_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    group = int(os.environ["REPLICA_GROUP_ID"])
    start = uuid.uuid4().hex[:8]
    torch.manual_seed(0)
    model = nn.Linear(16, 16)
    inner = optim.SGD(model.parameters(), lr=0.01)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=5)),
        min_replica_size=1,
        load_state_dict=lambda state: (model.load_state_dict(state["model"]), inner.load_state_dict(state["optim"])),
        state_dict=lambda: {"model": model.state_dict(), "optim": inner.state_dict()},
        replica_id=f"group_{group}",
        timeout=timedelta(seconds=10),
    )
    optimizer = Optimizer(manager, inner)
    data = torch.Generator().manual_seed(1000 + group)
    log = directory / f"group{group}.jsonl"
    kill = directory / f"kill-group{group}"
    print(f"group {group} start {start} at step {manager.current_step()}", flush=True)
    while True:
        if kill.exists():
            kill.unlink()
            os.kill(os.getpid(), signal.SIGKILL)
        optimizer.zero_grad()
        inputs = torch.randn(8, 16, generator=data)
        (model(inputs) - inputs).pow(2).mean().backward()
        for work in [manager.allreduce(param.grad) for param in model.parameters()]:
            work.wait()
        time.sleep(step_s)
        before = manager.current_step()
        optimizer.step()
        committed = manager.current_step() > before
        digest = hashlib.sha256(b"".join(bytes(t.detach().contiguous().untyped_storage())
                                         for t in model.state_dict().values())).hexdigest()[:16]
        line = {"step": manager.current_step(), "committed": committed, "participants": manager.num_participants(),
                "hash": digest, "start": start}
        with log.open("a") as out:
            out.write(json.dumps(line) + "\n")
        if committed and (directory / "stop").exists():
            break
    manager.shutdown(wait=False)
    print(f"group {group} done at step {manager.current_step()}", flush=True)


if __name__ == "__main__":
    main()

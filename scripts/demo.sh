#!/usr/bin/env bash
# The README's main command: installs torch (CPU build), torchx 0.7.0 and torchx_ext into .venv
# (not the test tools), then runs a 2-node x 2-process DDP training job on this machine through
# torchx (local_cwd) and our dist.ddp component.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
# The venv's torchx (local_cwd runs the role's "python" with the interpreter torchx runs under).
export PATH="$PWD/.venv/bin:$PATH"
torchx topo -j 2x2
echo
torchx run -s local_cwd dist.ddp -j 2x2 --script examples/train.py

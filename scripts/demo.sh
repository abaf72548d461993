#!/usr/bin/env bash
# The README's main command: installs the package into .venv, then shows this machine's
# topology and the binding plan two local ranks would get.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
.venv/bin/python -m torchx_ext.numa show
echo
.venv/bin/python -m torchx_ext.numa plan --nproc-per-node 2 --mode exclusive

#!/usr/bin/env bash
# The README's test command: installs everything into .venv, type-checks, runs the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh --test
.venv/bin/python -m mypy
.venv/bin/python -m pytest "$@"

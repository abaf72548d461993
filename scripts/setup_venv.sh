#!/usr/bin/env bash
# Creates .venv (if missing) and installs the package, pinned by requirements-test.txt.
# Usage: scripts/setup_venv.sh [--test]   (--test also installs the test dependencies)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if [ "${1:-}" = "--test" ]; then
  "${pip[@]}" -r requirements-test.txt
fi
"${pip[@]}" -c requirements-test.txt -e .

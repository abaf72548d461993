#!/usr/bin/env bash
# Creates the virtual environment of one torchx line (if missing) and installs the package in it.
# Usage: scripts/setup_venv.sh [--test] [--line 0.7.0|nightly]
#   --test   also installs the test dependencies
#   --line   0.7.0 (default): .venv, torchx 0.7.0, the package editable, everything pinned by
#            requirements-test.txt;
#            nightly: .venv-nightly, made as a user of torchx-nightly makes it: torch and
#            torchx-nightly first (requirements-nightly.txt), then the package (not editable)
#            with whatever pip resolves for it, with no constraints that would hide a pulled
#            torchx, then the test dependencies (requirements-nightly-test.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
test_deps=false
line=0.7.0
while [ $# -gt 0 ]; do
  case "$1" in
    --test) test_deps=true ;;
    --line) line="${2:?--line needs 0.7.0 or nightly}"; shift ;;
    *) echo "setup_venv.sh: unknown argument $1 (expected --test, --line 0.7.0|nightly)" >&2; exit 2 ;;
  esac
  shift
done
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
case "$line" in
  0.7.0)
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
    if $test_deps; then
      "${pip[@]}" -r requirements-test.txt
    fi
    # The pins of requirements-test.txt as constraints only: pip would read its `-r` line (the
    # test tools) as requirements. numpy: torch warns at every import without it.
    constraints="$(mktemp)"
    trap 'rm -f "$constraints"' EXIT
    grep -v '^-r ' requirements-test.txt > "$constraints"
    # The tests install the ft extra (torchft) as its users do, and check that it broke nothing.
    if $test_deps; then extras='[torchx,ft]'; else extras='[torchx]'; fi
    "${pip[@]}" -c "$constraints" -e ".$extras" numpy
    if $test_deps; then .venv/bin/python -m pip check --disable-pip-version-check; fi
    ;;
  nightly)
    [ -x .venv-nightly/bin/python ] || "$python" -m venv .venv-nightly
    pip=(.venv-nightly/bin/python -m pip install --quiet --disable-pip-version-check)
    "${pip[@]}" -r requirements-nightly.txt
    # A fresh build each time: setuptools would put files left in build/ from an older
    # checkout into the wheel.
    rm -rf build
    if $test_deps; then "${pip[@]}" '.[ft]'; else "${pip[@]}" .; fi
    rm -rf build
    if $test_deps; then
      "${pip[@]}" -r requirements-nightly-test.txt
      .venv-nightly/bin/python -m pip check --disable-pip-version-check
    fi
    ;;
  *) echo "setup_venv.sh: unknown line '$line' (expected 0.7.0 or nightly)" >&2; exit 2 ;;
esac

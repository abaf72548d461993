#!/usr/bin/env bash
# The README's test command: installs each torchx line's environment (scripts/setup_venv.sh:
# .venv with torchx 0.7.0, .venv-nightly with torchx-nightly), type-checks once, and runs the
# whole suite on each line (the launcher's and planner's slowest tests on the first only), with
# a Docker engine it starts (and installs, as root) on a private socket (scripts/docker_engine.sh),
# an image registry on loopback (scripts/registry.sh) and a two-node Slurm on this host (scripts/slurm_cluster.sh). Tests read TORCHX_EXT_LINE to
# check that they run on the line meant. Exits non-zero if any step fails on any line.
# Usage: scripts/test.sh [--line 0.7.0|nightly|both] [PYTEST ARGS...]
#   e.g. scripts/test.sh --line nightly tests/integration/test_torchx_lines.py -x
set -uo pipefail
cd "$(dirname "$0")/.."
lines=(0.7.0 nightly)
if [ "${1:-}" = "--line" ]; then
  case "${2:-}" in
    0.7.0|nightly) lines=("$2") ;;
    both) ;;
    *) echo "test.sh: --line takes 0.7.0, nightly or both, not '${2:-}'" >&2; exit 2 ;;
  esac
  shift 2
fi
venv() { if [ "$1" = nightly ]; then echo .venv-nightly; else echo .venv; fi; }
for line in "${lines[@]}"; do
  echo "=== torchx $line: installing into $(venv "$line")"
  bash scripts/setup_venv.sh --test --line "$line" || exit 1
done
# What the tests run against, each started by its script, which prints NAME=VALUE once it answers
# (exported here) and at the end stops only what it started itself. Under CI=true one that cannot
# start ends the run; elsewhere its tests are skipped.
stops=()
start_service() {  # WHAT SCRIPT
  local what="$1" script="scripts/$2" printed
  echo "=== $what"
  if printed="$(bash "$script" start)"; then
    export "$printed"
    stops=("bash $script stop" "${stops[@]}")
    trap 'for stop in "${stops[@]}"; do $stop; done' EXIT
  elif [ "${CI:-}" = true ]; then
    echo "test.sh: CI=true and the $what could not be started" >&2; exit 1
  else
    echo "test.sh: warning: no $what; the tests that need it are skipped" >&2
  fi
}
# A Docker engine on a private socket, for local_docker's tests, the conformance suite and the test
# Kubernetes cluster's pods; an image registry on loopback (Debian's docker-registry), which the
# workspace tests push to through the engine and the test kubelet pulls from; a two-node Slurm.
start_service "Docker engine" docker_engine.sh
start_service "image registry" registry.sh
start_service "Slurm test cluster" slurm_cluster.sh
echo "=== mypy (with torchx ${lines[0]})"
"$(venv "${lines[0]}")/bin/python" -m mypy || exit 1
# The launcher and the planner import nothing from torchx (and both lines pin the same torch),
# so on a whole run their slowest tests (processes, property tests) run on the first line only:
# about 4 minutes less per further line. So do the fault tests (4 minutes): what a lost replica
# does is the schedulers' and the launcher's own; the torchx-facing code they go through is the
# conformance suite's, which runs on every line. So does what each retry_policy restarts (both lines'
# spellings of the policies are the unit tests'). Likewise the engines' own slow cases: sixteen
# local jobs at once, the engine fixture's and the test Kubernetes API server's own checks (no
# torchx in them), and Slurm's time limit (a whole minute); and the Kubernetes and Slurm
# schedulers' own suites (backends, placement, GPUs, limits: what they ask of the cluster),
# whose calls into torchx (run, status, log, cancel, dry run) are the conformance suite's too.
first_line_only=(integration/test_bind integration/test_launcher integration/test_launcher_api integration/test_rendezvous_contract integration/test_hang
                 integration/test_launcher_in_process integration/test_launcher_output integration/test_launcher_watchdog integration/test_watchdog_round
                 integration/test_liveness_start
                 integration/test_partition slurm/test_partition slurm/test_spares integration/test_group_rank
                 integration/test_launcher_parity integration/test_worker_start integration/test_numa_cli
                 unit/test_plan_properties unit/test_placement conformance/test_faults conformance/test_log_options
                 conformance/test_retry_policy integration/test_rendezvous_scale_bench integration/test_arrival_rendezvous integration/test_rendezvous_faults unit/test_rendezvous_core integration/test_torchrun_assertions
                 integration/test_local_concurrency docker/test_engine_fixture kubernetes/test_apiserver
                 kubernetes/test_backends kubernetes/test_kubernetes slurm/test_slurm slurm/test_gpus slurm/test_allocation
                 slurm/test_allocation_warm slurm/test_torchft)
# The kubernetes workspace's other backends and its tag-moved case: the pod template and the push
# are the same whatever runs the pods; how each torchx line hands over the workspace is the job
# backend's case, which runs on both.
first_line_only_tests=(
  "kubernetes/test_workspaces.py::test_an_edited_script_runs_edited_and_an_unchanged_one_is_not_built_or_pushed_again[jobset]"
  "kubernetes/test_workspaces.py::test_an_edited_script_runs_edited_and_an_unchanged_one_is_not_built_or_pushed_again[volcano]"
  "kubernetes/test_workspaces.py::test_a_pod_started_again_after_the_tag_moved_runs_the_digest_it_was_submitted_with"
  # torchft's losses on the engines: the launcher's and the schedulers' own; local_cwd's case runs on both lines.
  "conformance/test_torchft.py::test_a_lost_replica_group_costs_the_others_a_step_not_a_restart_and_comes_back_alone[local_docker]"
  "conformance/test_torchft.py::test_a_lost_replica_group_costs_the_others_a_step_not_a_restart_and_comes_back_alone[kubernetes]"
)
# Three lanes at once, each running both torchx lines in turn: the tests that need no engine
# (unit, integration, parity, and the conformance and fault suites' local_cwd cases), those of
# Docker and the test Kubernetes cluster, and Slurm's. The engine lanes mostly wait on their
# engines (about 40 % of one CPU measured), so the local lane's time comes off the run's (a
# clean-clone CI run: 31 minutes, 65 before; with Slurm in a lane of its own, 39 minutes, 50 before). Each lane has its own pytest temp folder; the local and Slurm lanes' output is printed when
# both are done. With PYTEST ARGS, one pytest per line runs just those, as before.
local_lane=(tests/unit tests/integration tests/parity tests/conformance -k "not conformance or local_cwd")
engine_lane=(tests/docker tests/kubernetes tests/conformance -k "not conformance or (not local_cwd and not slurm)")
# Slurm's own lane beside them: its tests mostly wait on the controller, and need its nodes to themselves.
slurm_lane=(tests/slurm tests/conformance -k "not conformance or slurm")
run_line() {  # LINE LANE-NAME PYTEST-ARGS...: one torchx line's pytest; non-zero if it failed
  local line="$1" lane="$2"
  shift 2
  local skip=()
  if [ "$line" != "${lines[0]}" ]; then
    for module in "${first_line_only[@]}"; do skip+=("--ignore=tests/$module.py"); done
    for test in "${first_line_only_tests[@]}"; do skip+=("--deselect=tests/$test"); done
    echo "(these ran on torchx ${lines[0]} only: ${first_line_only[*]} ${first_line_only_tests[*]})"
  fi
  TORCHX_EXT_LINE="$line" "$(venv "$line")/bin/python" -m pytest --durations=25 \
    --basetemp="${TMPDIR:-/tmp}/torchx-ext-pytest-$lane-$line" "${skip[@]}" "$@"
}
# The fault tests note each recovery they time (tests/helpers.py: record_restart); the slowest of
# each test is written in the run's summary below, so a drift shows before it crosses a bound.
export TORCHX_EXT_RESTART_TIMES="$(mktemp)"
slowest_restarts() {
  [ -s "$TORCHX_EXT_RESTART_TIMES" ] || return 0
  echo "=== test.sh: the slowest recovery each fault test timed (seconds / the bound it asserts)"
  "$(venv "${lines[0]}")/bin/python" - "$TORCHX_EXT_RESTART_TIMES" <<'PY'
import json, sys
slowest = {}
for text in open(sys.argv[1]):
    row = json.loads(text)
    key = (row["test"], row["what"], row["line"])
    if key not in slowest or row["seconds"] > slowest[key]["seconds"]:
        slowest[key] = row
for (test, what, line), row in sorted(slowest.items()):
    share = row["seconds"] / row["bound_s"] if row["bound_s"] else 0
    mark = "  <-- over 80 % of its bound" if share > 0.8 else ""
    print(f"{row['seconds']:7.1f} / {row['bound_s']:.1f}  {test} ({what}; torchx {line}){mark}")
PY
}
failed=()
if [ $# -gt 0 ]; then
  for line in "${lines[@]}"; do
    echo "=== torchx $line: pytest $*"
    run_line "$line" args "$@" || failed+=("$line")
  done
  slowest_restarts
else
  side_lane() {  # NAME PYTEST-ARGS...: every torchx line's run of a lane, in the background, into its log
    local name="$1"
    shift
    (
      status=0
      for line in "${lines[@]}"; do
        echo "=== torchx $line: pytest, the $name lane"
        run_line "$line" "$name" "$@" || { echo "test.sh: the $name lane failed on torchx $line"; status=1; }
      done
      exit "$status"
    ) >"$logs/$name" 2>&1 &
    pids+=("$!")
  }
  logs="$(mktemp -d)"
  pids=()
  side_lane local "${local_lane[@]}"
  side_lane slurm "${slurm_lane[@]}"
  for line in "${lines[@]}"; do
    echo "=== torchx $line: pytest, the engine lane (the local and slurm lanes run beside it)"
    run_line "$line" engines "${engine_lane[@]}" 2>&1 | tee -a "$logs/engines"
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("$line (engines)")
  done
  wait "${pids[0]}" || failed+=("local lane")
  wait "${pids[1]}" || failed+=("slurm lane")
  for name in local slurm; do
    cat "$logs/$name"
    grep "^test.sh: the $name lane failed" "$logs/$name" >&2 || true
  done
  slowest_restarts
  if [ ${#failed[@]} -gt 0 ]; then
    # Last, where a reader of a long log's tail finds it: every lane's failures and their asserts.
    echo "=== test.sh: what failed, lane by lane"
    for name in engines local slurm; do
      grep -E "^(FAILED|ERROR) " "$logs/$name" 2>/dev/null | cut -c1-300 | head -n 60 | sed "s/^/$name: /" || true
      grep -E "^E   " "$logs/$name" 2>/dev/null | cut -c1-300 | head -n 40 | sed "s/^/$name: /" || true
    done
  fi
  rm -rf "$logs"
fi
rm -f "$TORCHX_EXT_RESTART_TIMES"
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: the suite failed: ${failed[*]} (torchx lines ${lines[*]})" >&2
  exit 1
fi

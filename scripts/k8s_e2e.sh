#!/usr/bin/env bash
# End to end on a real cluster (kind, say) that kubectl reaches, for each kubernetes backend whose
# CRDs the cluster has (the others are skipped with a line): a 2x1 gloo dist.ddp job to SUCCEEDED
# with both ranks' logs read, a failing job, a cancel, delete, and nothing of ours left.
#
#   scripts/k8s_e2e.sh IMAGE [NAMESPACE]
#
# IMAGE: an image the nodes can pull (kind: `kind load docker-image IMAGE`) with torch and
# torchx_ext installed and this checkout's examples/ and tests/conformance/jobs/ in its working
# directory. Run from the checkout, with torchx and torchx_ext installed. Not run by CI (no cluster).
set -euo pipefail

IMAGE=${1:?usage: scripts/k8s_e2e.sh IMAGE [NAMESPACE]}
NS=${2:-default}
failures=0

fail() { echo "FAIL [$backend]: $*"; failures=$((failures + 1)); }
state() { torchx status "$1" 2>/dev/null | awk '/State:/ {print $2; exit}'; }
submit() {  # prints the app handle
    torchx run -s kubernetes -cfg "backend=$backend,namespace=$NS,cancel_grace=5" --workspace "" \
        dist.ddp -j 2x1 --cpu 1 --memMB 1024 --image "$IMAGE" "$@" | grep '^kubernetes://'
}
wait_terminal() {  # prints the terminal state, or what it is after 300 s
    local deadline=$((SECONDS + 300)) now
    while now=$(state "$1"); [[ $now != SUCCEEDED && $now != FAILED && $now != CANCELLED ]]; do
        ((SECONDS < deadline)) || break
        sleep 2
    done
    echo "$now"
}

for backend in job jobset volcano; do
    case $backend in
        jobset) crd=jobsets.jobset.x-k8s.io ;;
        volcano) crd=jobs.batch.volcano.sh ;;
        *) crd= ;;
    esac
    if [[ -n $crd ]] && ! kubectl get crd "$crd" >/dev/null 2>&1; then
        echo "SKIP [$backend]: the cluster has no $crd CRD"
        continue
    fi
    echo "== $backend"
    handles=()

    handle=$(submit --script examples/train.py -- --steps 5) && handles+=("$handle")
    [[ $(wait_terminal "$handle") == SUCCEEDED ]] || fail "training job $handle did not succeed"
    torchx log "$handle/train/0" | grep -q "train.py: 2 ranks finished 5 steps" || fail "no success line from rank 0"
    torchx log "$handle/train/1" | grep -q "rank 1/2" || fail "no line from rank 1"

    handle=$(submit --script tests/conformance/jobs/exit_code.py -- 1 7) && handles+=("$handle")
    [[ $(wait_terminal "$handle") == FAILED ]] || fail "failing job $handle did not fail"
    torchx status "$handle" | grep -q "exit_code/1" || fail "the failure does not name replica exit_code/1"

    handle=$(submit --script tests/conformance/jobs/sleeper.py) && handles+=("$handle")
    deadline=$((SECONDS + 180))
    until [[ $(state "$handle") == RUNNING ]] || ((SECONDS > deadline)); do sleep 2; done
    torchx cancel "$handle"
    [[ $(wait_terminal "$handle") == CANCELLED ]] || fail "cancelled job $handle is not CANCELLED"

    for handle in "${handles[@]}"; do
        torchx delete "$handle" >/dev/null || fail "delete of $handle failed"
    done
    deadline=$((SECONDS + 120))
    while left=$(kubectl get jobs,services,pods,jobsets.jobset.x-k8s.io,jobs.batch.volcano.sh -n "$NS" \
                     -l torchx-ext/app-id --ignore-not-found -o name 2>/dev/null | grep -v '^$' || true)
          [[ -n $left ]] && ((SECONDS < deadline)); do
        sleep 2
    done
    [[ -z $left ]] || fail "left behind: $left"
done

if ((failures)); then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"

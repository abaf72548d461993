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
    apps=()

    if handle=$(submit --script examples/train.py -- --steps 5); then
        handles+=("$handle")
        [[ $(wait_terminal "$handle") == SUCCEEDED ]] || fail "training job $handle did not succeed"
        out=$(torchx log "$handle/train/0" 2>&1 || true)
        grep -q "train.py: 2 ranks finished 5 steps" <<<"$out" || fail "no success line from rank 0"
        out=$(torchx log "$handle/train/1" 2>&1 || true)
        grep -q "rank 1/2" <<<"$out" || fail "no line from rank 1"
    else
        fail "could not submit the training job"
    fi

    if handle=$(submit --script tests/conformance/jobs/exit_code.py -- 1 7); then
        handles+=("$handle")
        [[ $(wait_terminal "$handle") == FAILED ]] || fail "failing job $handle did not fail"
        out=$(torchx status "$handle" 2>&1 || true)
        grep -q "exit_code/1" <<<"$out" || fail "the failure does not name replica exit_code/1"
    else
        fail "could not submit the failing job"
    fi

    if handle=$(submit --script tests/conformance/jobs/sleeper.py); then
        handles+=("$handle")
        deadline=$((SECONDS + 180))
        until [[ $(state "$handle") == RUNNING ]] || ((SECONDS > deadline)); do sleep 2; done
        torchx cancel "$handle" || fail "cancel of $handle failed"
        [[ $(wait_terminal "$handle") == CANCELLED ]] || fail "cancelled job $handle is not CANCELLED"
    else
        fail "could not submit the job to cancel"
    fi

    for handle in ${handles[@]+"${handles[@]}"}; do
        apps+=("${handle##*:}")
        torchx delete "$handle" >/dev/null || fail "delete of $handle failed"
    done
    ((${#apps[@]})) || continue
    # This run's apps only, of every kind the cluster has.
    kinds=jobs.batch,services,pods
    kubectl get crd jobsets.jobset.x-k8s.io >/dev/null 2>&1 && kinds+=,jobsets.jobset.x-k8s.io
    kubectl get crd jobs.batch.volcano.sh >/dev/null 2>&1 && kinds+=,jobs.batch.volcano.sh
    selector="torchx-ext/app-id in ($(IFS=,; echo "${apps[*]}"))"
    deadline=$((SECONDS + 120))
    while :; do
        left=$(kubectl get "$kinds" -n "$NS" -l "$selector" -o name 2>&1) || left="(kubectl get failed) $left"
        [[ -n $left ]] && ((SECONDS < deadline)) || break
        sleep 2
    done
    [[ -z $left ]] || fail "left behind: $left"
done

if ((failures)); then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"

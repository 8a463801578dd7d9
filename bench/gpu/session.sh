#!/usr/bin/env bash
# One device call that does a whole GPU session's measuring under one deadline, for leases too
# short for a call per suite: the GPU tests, then each `suite[:dtypes]` of $PLAN in order (each
# through run.sh, in its own folder), every step stopped so that the whole ends by $DEADLINE
# seconds; then everything is packed into one archive in $OUT (the device tool brings back at
# most 8 files). Example, with build.sh's carry:
#   run(command="DEADLINE=400 PLAN='bert_matmul bert_matmul:bf16' bash bench/gpu/session.sh",
#       carry=[".gpu-carry"], timeout_s=460)
# A step is `suite`, `suite:dtypes` or `suite:dtypes:W1,W2` (only those workloads; dtypes may
# be empty: `resnet50_conv2d::R7,R8`).
# TESTS (names, as run.sh takes them; `none` skips the tests), TEST_SECONDS (default 60),
# TRIALS, SEED and BENCH_ARGS pass on to run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
deadline=$((start + ${DEADLINE:-400}))
final="${OUT:-$PWD/gpu-out}"
work=$(mktemp -d /tmp/gpu-session.XXXXXX)
mkdir -p "$final"
left() { echo $((deadline - $(date +%s))); }
pack() {
    tar -C "$work" -czf "$final/session.tar.gz" . 2>/dev/null
    echo "session.sh: packed $(du -sh "$final/session.tar.gz" | cut -f1) into session.tar.gz"
}
trap pack EXIT
status=0
if [ "${TESTS:-}" != none ]; then
    OUT="$work/tests" SUITES=none TEST_SECONDS="${TEST_SECONDS:-60}" \
        timeout "$(left)" bash bench/gpu/run.sh || status=1
fi
for step in ${PLAN:-}; do
    IFS=: read -r suite dtypes only <<<"$step"
    secs=$(left)
    if [ "$secs" -lt 20 ]; then
        echo "session.sh: no time left for $step" | tee -a "$work/skipped.txt"
        continue
    fi
    dir="$work/$suite${dtypes:+-$dtypes}${only:+-${only//,/-}}"
    OUT="$dir" SKIP_TESTS=1 SUITES="$suite" DTYPES="$dtypes" SUITE_SECONDS=$((secs - 10)) \
        BENCH_ARGS="${BENCH_ARGS:-}${only:+ --filter $only}" \
        timeout "$secs" bash bench/gpu/run.sh || status=1
done
exit $status

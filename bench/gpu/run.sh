#!/usr/bin/env bash
# Runs on a GPU machine (see build.sh): the CUDA tests, then the GPU bench suites named in
# $SUITES (default: the smoke suite), writing reports, plots and landscapes into $OUT.
#   SUITES="bert_matmul opevo_matmul" TRIALS=64 bash bench/gpu/run.sh
# One device call may run 10 minutes: run the tests with the smoke suite first, then one
# suite per call (SKIP_TESTS=1 SUITES=resnet50_conv2d ...). Each suite is stopped after
# $SUITE_SECONDS (default 540) so that what it finished still comes back.
# Half precision (tensor-core template against cuBLAS GemmEx / cuDNN in half), one call each:
#   SKIP_TESTS=1 DTYPES=bf16 SUITES="bert_matmul opevo_matmul" bash bench/gpu/run.sh
#   SKIP_TESTS=1 DTYPES=bf16 SUITES=bolt_epilogue bash bench/gpu/run.sh   # fused vs cuBLAS + kernel
#   SKIP_TESTS=1 DTYPES=bf16 SUITES=opevo_batch_matmul bash bench/gpu/run.sh
#   SKIP_TESTS=1 DTYPES=f16 SUITES=resnet50_conv2d bash bench/gpu/run.sh
# DTYPES is passed as --dtypes and named in the output files.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY="$PWD/.gpu-carry"
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
# NVRTC, cuBLAS and cuDNN: from the CUDA toolkit or PyTorch's NVIDIA wheels, wherever they are.
libdirs=$(find / -xdev \( -name 'libnvrtc.so.13' -o -name 'libcublas.so.13' -o -name 'libcudnn.so.9' \) \
    -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true
export TENSOR_DSL_CACHE="$OUT/cache"
status=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    for t in cuda_runtime measure_cuda device_tensor; do
        echo "== test $t"
        "$CARRY/$t" --test-threads=1 2>&1 | tail -40 | tee "$OUT/test-$t.txt" || status=1
    done
fi
date=$(date -u +%Y-%m-%d)
dtypes=()
tag=""
if [ -n "${DTYPES:-}" ]; then
    dtypes=(--dtypes "$DTYPES")
    tag="-$(echo "$DTYPES" | tr -c 'a-z0-9\n' '_')"
fi
for s in ${SUITES:-smoke}; do
    echo "== bench $s ${DTYPES:-}"
    timeout "${SUITE_SECONDS:-540}" \
    "$CARRY/bench" --suite "$s" --device cuda --trials "${TRIALS:-64}" --seed "${SEED:-1}" \
        "${dtypes[@]}" ${BENCH_ARGS:-} \
        --json "$OUT/$date-cuda-$s$tag.json" --plot "$OUT/$date-cuda-$s$tag.svg" \
        --record-landscape "$OUT/landscapes" 2>&1 | tail -60 || status=1
done
# Landscapes travel back as one archive ($OUT is copied at most two folders deep).
if [ -d "$OUT/landscapes" ]; then
    tar -C "$OUT" -czf "$OUT/landscapes-$date-cuda.tar.gz" landscapes && rm -rf "$OUT/landscapes"
fi
rm -rf "$OUT/cache"
exit $status

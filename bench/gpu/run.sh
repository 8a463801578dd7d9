#!/usr/bin/env bash
# Runs on a GPU machine (see build.sh): the GPU tests, then the GPU bench suites named in
# $SUITES (default: the smoke suite), writing everything a session commits into $OUT
# (default ./gpu-out): environment.txt (date, GPU, driver, libraries, the commands),
# test-<name>.txt (each test binary's full output), the bench's JSON/SVG and a landscapes
# archive.
#   SUITES="bert_matmul opevo_matmul" TRIALS=64 bash bench/gpu/run.sh
# One device call may run 10 minutes: run the tests first (SUITES=none: no bench suite),
# then one suite per call (SKIP_TESTS=1 SUITES=smoke, SKIP_TESTS=1 SUITES=resnet50_conv2d,
# ...). Each suite is stopped after $SUITE_SECONDS (default 540) so that what it finished
# still comes back; each test binary after $TEST_SECONDS (default 300); every file is
# written as it goes, so a call cut short still brings back what ran. TESTS="cuda_runtime
# cubin" runs only those test binaries.
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
# build.sh packs the binaries into one archive (the device tool's 64 MiB limit).
if [ ! -x "$CARRY/bench" ] && [ -f "$CARRY/binaries.tar.gz" ]; then
    tar -C "$CARRY" -xzf "$CARRY/binaries.tar.gz" || exit 2
fi
if [ ! -x "$CARRY/bench" ]; then
    echo "run.sh: $CARRY/bench is missing: run bench/gpu/build.sh and carry .gpu-carry" >&2
    exit 2
fi

# NVRTC, cuBLAS and cuDNN: from the CUDA toolkit or PyTorch's NVIDIA wheels, CUDA 13 or 12,
# wherever they are. cudarc tries libX.so, then libX.so.13, then libX.so.12 in every folder
# on LD_LIBRARY_PATH, so a CUDA 13 library wins where both are present. NVRTC needs its
# builtins library beside it (both wheels ship it there).
libdirs=$(find / -xdev \( -name 'libnvrtc.so.1[23]' -o -name 'libcublas.so.1[23]' \
    -o -name 'libcudnn.so.9' \) -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# ptxas and nvdisasm (the cubin test and register reports): the toolkit's bin folder.
for tool in ptxas nvdisasm; do
    if ! command -v "$tool" >/dev/null; then
        found=$(find / -xdev -name "$tool" -type f -perm -u+x 2>/dev/null | head -1)
        [ -n "$found" ] && export PATH="$(dirname "$found"):$PATH"
    fi
done
export TENSOR_DSL_CACHE="$OUT/cache"
# Every GPU test fails instead of skipping; the compile tests need NVRTC and ptxas too.
export TENSOR_DSL_REQUIRE_GPU=1 TENSOR_DSL_REQUIRE_NVRTC=1
export TENSOR_DSL_BENCH_EXE="$CARRY/bench" TENSOR_DSL_CLI_EXE="$CARRY/tensor-dsl"
export TENSOR_DSL_TEST_ARTIFACTS="$OUT/artifacts"
date=$(date -u +%Y-%m-%d)

# What this run ran on, and how.
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "command: SUITES='${SUITES:-smoke}' TRIALS=${TRIALS:-64} SEED=${SEED:-1} DTYPES='${DTYPES:-}' SKIP_TESTS=${SKIP_TESTS:-0} TESTS='${TESTS:-}' BENCH_ARGS='${BENCH_ARGS:-}' bash bench/gpu/run.sh"
    cat "$CARRY/BUILD_INFO" 2>/dev/null
    echo "host: $(uname -srm); $(nproc) CPUs"
    echo "== nvidia-smi"
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1
    nvidia-smi 2>&1 | head -15
    echo "== libraries (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
    for d in ${libdirs//:/ }; do ls -1 "$d" | grep -E '^lib(nvrtc|nvrtc-builtins|cublas|cublasLt|cudnn)\.so' | sed "s|^|$d/|"; done
    echo "ptxas: $(command -v ptxas || echo none) $(ptxas --version 2>/dev/null | tail -1)"
    echo "nvdisasm: $(command -v nvdisasm || echo none) $(nvdisasm --version 2>/dev/null | tail -1)"
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
    echo "cc: $(cc --version 2>/dev/null | head -1)"
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

status=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    for t in ${TESTS:-cuda_runtime measure_cuda device_tensor cubin tensorcore_gpu stages device_env gpu_defaults cli smoke}; do
        exe="$CARRY/test-$t"
        args=(--test-threads=1)
        # Only the GPU test of the CLI and bench suites (the rest are CPU tests, run by CI).
        case "$t" in
            cli) args+=(--exact tune_on_cuda_records_the_gpu_or_says_why_not) ;;
            smoke) args+=(--exact cuda_runs_the_smoke_suite_or_says_why_not) ;;
            # Prints each case as it ends: a run stopped at TEST_SECONDS still shows how far it got.
            tensorcore_gpu) args+=(--nocapture) ;;
        esac
        echo "== test $t ${args[*]}"
        {
            echo "command: .gpu-carry/test-$t ${args[*]} (TENSOR_DSL_REQUIRE_GPU=1)"
            echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
            timeout "${TEST_SECONDS:-300}" "$exe" "${args[@]}" 2>&1
            echo "exit status: $?"
        } >"$OUT/test-$t.txt"
        grep -q '^exit status: 0$' "$OUT/test-$t.txt" || status=1
        grep -E '^test |test result|panicked|FAILED|exit status' "$OUT/test-$t.txt" | tail -40
    done
fi

dtypes=()
tag=""
if [ -n "${DTYPES:-}" ]; then
    dtypes=(--dtypes "$DTYPES")
    tag="-$(echo "$DTYPES" | tr -c 'a-z0-9\n' '_')"
fi
for s in ${SUITES:-smoke}; do
    [ "$s" = none ] && continue
    cmd=("$CARRY/bench" --suite "$s" --device cuda --trials "${TRIALS:-64}" --seed "${SEED:-1}"
        "${dtypes[@]}" ${BENCH_ARGS:-}
        --json "$OUT/$date-cuda-$s$tag.json" --plot "$OUT/$date-cuda-$s$tag.svg"
        --record-landscape "$OUT/landscapes")
    echo "== bench $s ${DTYPES:-}"
    echo "bench $s: ${cmd[*]#$CARRY/}" >>"$OUT/environment.txt"
    timeout "${SUITE_SECONDS:-540}" "${cmd[@]}" 2>&1 | tee "$OUT/$date-cuda-$s$tag.log" | tail -60 || status=1
    # The stages suite's other GPU library: PyTorch (cuDNN has no layer norm outside its
    # graph API), timed the same way in the same call.
    if [ "$s" = stages ]; then
        py=python3
        for p in /opt/torch/.venv/bin/python "$(command -v python3)"; do
            [ -x "$p" ] && "$p" -c 'import torch' 2>/dev/null && py="$p" && break
        done
        echo "== PyTorch stages ($py)"
        timeout 120 "$py" bench/gpu/torch_stages.py --out "$OUT/$date-cuda-stages-torch.json" 2>&1 |
            tee "$OUT/$date-cuda-stages-torch.log" || status=1
    fi
done
# Landscapes travel back as one archive ($OUT is copied at most two folders deep).
if [ -d "$OUT/landscapes" ]; then
    tar -C "$OUT" -czf "$OUT/landscapes-$date-cuda.tar.gz" landscapes && rm -rf "$OUT/landscapes"
fi
rm -rf "$OUT/cache"
exit $status

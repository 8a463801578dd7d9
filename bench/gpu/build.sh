#!/usr/bin/env bash
# Builds, on a machine with Rust, everything a GPU session runs, into .gpu-carry/ (ignored by
# git): the release `bench` and `tensor-dsl` binaries and every test binary with a GPU part.
# Then, with the device tool:
#   run(command="bash bench/gpu/run.sh", carry=[".gpu-carry"])
# The GPU machines have a CUDA driver, nvcc and PyTorch (with cuBLAS and cuDNN) but no Rust.
#
# The test binaries (every test that skips without a GPU; bench/gpu/run.sh runs them with
# TENSOR_DSL_REQUIRE_GPU=1, so there they fail instead):
#   tensor-dsl:       cuda_runtime measure_cuda device_tensor cubin tensorcore_gpu
#                     (fake_gpu needs no GPU)
#   tensor-dsl-tests: stages device_env
#   bench:            smoke gpu_defaults      (they run $TENSOR_DSL_BENCH_EXE)
#   tensor-dsl-cli:   cli                     (it runs $TENSOR_DSL_CLI_EXE)
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# The example app's build script must not tune while we build.
export TENSOR_DSL_BUILD_TUNE=off
CARRY="$PWD/.gpu-carry"
rm -rf "$CARRY" && mkdir -p "$CARRY"
cargo build --release -p bench -p tensor-dsl-cli
cp "$CARGO_TARGET_DIR/release/bench" "$CARGO_TARGET_DIR/release/tensor-dsl" "$CARRY/"
tests=(
    -p tensor-dsl --test cuda_runtime --test measure_cuda --test device_tensor --test cubin
    --test tensorcore_gpu
    -p tensor-dsl-tests --test stages --test device_env
    -p bench --test smoke --test gpu_defaults
    -p tensor-dsl-cli --test cli
)
cargo test --release "${tests[@]}" --no-run
# The executables, by target name (each file once; a test named like a binary gets a prefix).
cargo test --release "${tests[@]}" --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys, shutil
carry = sys.argv[1]
names = set()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        name = "test-" + m["target"]["name"]
        if name in names:
            continue
        names.add(name)
        shutil.copy(m["executable"], carry + "/" + name)
        print("carry:", name)
for wanted in ["cuda_runtime", "measure_cuda", "device_tensor", "cubin", "tensorcore_gpu", "stages", "device_env",
               "smoke", "gpu_defaults", "cli"]:
    if "test-" + wanted not in names:
        sys.exit("build.sh: the test binary " + wanted + " was not built")
' "$CARRY"
# What was built, for the files a session commits.
{
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
    echo "rustc: $(rustc --version)"
} >"$CARRY/BUILD_INFO"
# The carry limit is 64 MiB: drop the debug info.
strip "$CARRY"/bench "$CARRY"/tensor-dsl "$CARRY"/test-* 2>/dev/null || true
# The device tool carries 64 MiB in all, the carry and the working tree's files together:
# the binaries travel as one gzip archive (about half the size), which run.sh unpacks.
tar -C "$CARRY" -czf "$CARRY.tar.gz" . && rm -rf "$CARRY" && mkdir -p "$CARRY" &&
    mv "$CARRY.tar.gz" "$CARRY/binaries.tar.gz"
carry=$(du -sb "$CARRY" | cut -f1)
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$(((carry + ${tree:-0}) / 1048576))
echo "build.sh: $((carry / 1048576)) MiB to carry + $((${tree:-0} / 1048576)) MiB of tree = $total MiB (the limit is 64)"
if [ "$total" -gt 62 ]; then
    echo "build.sh: $total MiB is over what the device tool carries (64 MiB, less headroom)" >&2
    exit 1
fi

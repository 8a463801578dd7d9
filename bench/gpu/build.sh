#!/usr/bin/env bash
# Builds, on a machine with Rust, everything a GPU session runs, into .gpu-carry/ (ignored by
# git): the release `bench` binary and the CUDA test binaries. Then, with the device tool:
#   run(command="bash bench/gpu/run.sh", carry=[".gpu-carry"])
# The GPU machines have CUDA, PyTorch (and with it cuBLAS and cuDNN) but no Rust.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
CARRY="$PWD/.gpu-carry"
rm -rf "$CARRY" && mkdir -p "$CARRY"
cargo build --release -p bench
cp "$CARGO_TARGET_DIR/release/bench" "$CARRY/"
# The test binaries that need a GPU to do more than their no-GPU checks.
cargo test --release -p tensor-dsl --test cuda_runtime --test measure_cuda --test device_tensor --no-run \
    --message-format=json 2>/dev/null |
    python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], sys.argv[1] + "/" + m["target"]["name"])
        print("carry:", m["target"]["name"])
' "$CARRY"
# The carry limit is 64 MiB: drop the debug info.
strip "$CARRY"/* 2>/dev/null || true
du -sh "$CARRY"

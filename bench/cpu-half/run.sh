#!/usr/bin/env bash
# bf16 matmuls on the CPU, side by side in one process per shape: our untuned default in f32
# and in bf16 (bf16 operands, f32 output) against oneDNN's matmul in f32 and bf16.
#
#   bench/cpu-half/run.sh OUT_DIR [MxNxK ...] [-- EXTRA_BF16.so]
#
# Needs: target/release/tensor-dsl (cargo build --release -p tensor-dsl-cli), cc, Debian
# libdnnl-dev. Compiles the emitted C with the product's flags. A benchmark: run it on an
# idle machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run.sh OUT_DIR [MxNxK ...]}
shift
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(512x1024x1024 512x512x512 512x3072x768 512x768x768 512x64x1024)
mkdir -p "$out"
cc -O2 -march=native -fopenmp "$root/bench/cpu-half/compare.c" -o "$out/compare" -ldnnl -ldl -lm
flags=(-O3 -fPIC -shared -fno-math-errno -march=native -fopenmp)
bin="$root/target/release/tensor-dsl"
for s in "${shapes[@]}"; do
    IFS=x read -r m n k <<<"$s"
    for dt in f32 bf16; do
        d="$out/$s-$dt"
        rm -rf "$d"
        types=""
        [ "$dt" = bf16 ] && types="a=bf16,b=bf16,c=f32"
        "$bin" emit --kernel 'c[[i,j]] += a[[i,k]] * b[[k,j]]' \
            --shapes "a=${m}x${k},b=${k}x${n},c=${m}x${n}" --dtypes "$types" --out "$d" >/dev/null
        cc "${flags[@]}" "$d/config_0000.c" -o "$d/ours.so"
    done
    echo "== $s" | tee -a "$out/results.txt"
    "$out/compare" "$m" "$n" "$k" "$out/$s-f32/ours.so" "$out/$s-bf16/ours.so" 2>&1 | tee -a "$out/results.txt"
done

#!/usr/bin/env bash
# Records sampled landscapes of today's CPU spaces and runs the strategy study on them:
# the tuner's acceptance check (issue 15), offline.
#
#   bench/landscapes.sh                # on an idle machine; about 10-11 minutes on 2 cores
#   DATE=2026-11-24 bench/landscapes.sh
#   SAMPLE=40 NEIGHBOURS=2 REFINE=4 bench/landscapes.sh   # a quicker, coarser run
#   TRANSFER=1 bench/landscapes.sh     # also the study with leave-one-out transfer
#   SPACES=cpu-v5 bench/landscapes.sh  # the tag naming the spaces' version in the paths
#
# For each shape below (2 matmuls, 2 batched matmuls, 3 convolutions; the families of
# /work/shared/workloads.json at shapes the bench suites do not tune), `tensor-dsl landscape`
# measures a uniform sample of SAMPLE valid points of the space as it is when this runs
# (plus the template's default), then every neighbour (one knob step) of the NEIGHBOURS
# fastest, then the REFINE fastest twice more; into
# bench/results/landscapes-<DATE>-<SPACES>/<name>.jsonl. A rerun continues where it stopped
# (recorded points are skipped). Then `tensor-dsl study` replays every strategy at 32 and
# 64 trials over 10 seeds, with the zero-trial pick leave-one-shape-out, into
# bench/results/strategies-<DATE>-<SPACES>.md (+ a folder with study.json and the SVGs).
#
# Cost estimate (measured on a busy 2-core machine with 8-20 points per space, so only an
# estimate): about 0.4-0.6 s per point (compile + 4 timed calls), ~125 points per shape,
# so ~8 minutes of recording; the study ~2-3 minutes. Build first (not counted):
#   cargo build --release -p tensor-dsl-cli
set -euo pipefail

cd "$(dirname "$0")/.."
DATE=${DATE:-$(date -u +%Y-%m-%d)}
SAMPLE=${SAMPLE:-80}
NEIGHBOURS=${NEIGHBOURS:-3}
REFINE=${REFINE:-6}
SEEDS=${SEEDS:-10}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
BIN=${TENSOR_DSL:-$TARGET_DIR/release/tensor-dsl}
# The spaces' version: v4 was recorded before the convolution template's pixel-vector and
# loop-order knobs (2026-11-26), v5 with them.
SPACES=${SPACES:-cpu-v5}
OUT=bench/results/landscapes-$DATE-$SPACES
STUDY=bench/results/strategies-$DATE-$SPACES

if [ ! -x "$BIN" ]; then
  echo "landscapes.sh: $BIN not found: cargo build --release -p tensor-dsl-cli (or set TENSOR_DSL)" >&2
  exit 2
fi
mkdir -p "$OUT"

MM='c[[i, j]] += a[[i, k]] * b[[k, j]]'
BMM='out[[b, m, n]] += lhs[[b, m, k]] * rhs[[b, k, n]]'
CONV='y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]'

# name | kernel name | kernel | shapes (one kernel text per family, so the study's
# leave-one-shape-out pick learns from the family's other shapes)
SHAPES=(
  "mm_384x768x320|matmul|$MM|a=384x768,b=768x320,c=384x320"
  "mm_256x512x768|matmul|$MM|a=256x512,b=512x768,c=256x768"
  "bmm_192x128x64x128|batch_matmul|$BMM|lhs=192x128x128,rhs=192x128x64,out=192x128x64"
  "bmm_96x64x128x64|batch_matmul|$BMM|lhs=96x64x64,rhs=96x64x128,out=96x64x128"
  "conv3x3_c96f96_28|conv2d|$CONV|x=1x96x28x28,w=96x96x3x3,y=1x96x28x28"
  "conv3x3_c128f64_28|conv2d|$CONV|x=1x128x28x28,w=64x128x3x3,y=1x64x28x28"
  "conv3x3_c64f128_14|conv2d|$CONV|x=1x64x14x14,w=128x64x3x3,y=1x128x14x14"
)

start=$(date +%s)
for entry in "${SHAPES[@]}"; do
  IFS='|' read -r file name kernel shapes <<<"$entry"
  t0=$(date +%s)
  "$BIN" landscape --name "$name" --kernel "$kernel" --shapes "$shapes" \
    --out "$OUT/$file.jsonl" --max "$SAMPLE" --neighbours "$NEIGHBOURS" --refine "$REFINE"
  echo "landscapes.sh: $file took $(($(date +%s) - t0)) s ($(($(date +%s) - start)) s so far)" >&2
done

t0=$(date +%s)
"$BIN" study "$OUT"/*.jsonl --seeds "$SEEDS" --budgets 32,64 --out "$STUDY" >/dev/null
cp "$STUDY/study.md" "$STUDY.md"
# The markdown's SVG links are relative to the study folder.
sed -i "s|](\([^)]*\.svg\))|]($(basename "$STUDY")/\1)|" "$STUDY.md"
echo "landscapes.sh: study took $(($(date +%s) - t0)) s; $(($(date +%s) - start)) s in all; wrote $STUDY.md" >&2
grep -A20 '^## Over all landscapes' "$STUDY.md" >&2

# TRANSFER=1: the study again with each run learning first from the kernel's other
# shapes (leave-one-out), as users' tuning does with records at hand (~2-3 more minutes).
if [ "${TRANSFER:-0}" = 1 ]; then
  "$BIN" study "$OUT"/*.jsonl --seeds "$SEEDS" --budgets 32,64 --transfer --out "$STUDY-transfer" >/dev/null
  cp "$STUDY-transfer/study.md" "$STUDY-transfer.md"
  sed -i "s|](\([^)]*\.svg\))|]($(basename "$STUDY")-transfer/\1)|" "$STUDY-transfer.md"
  grep -A20 '^## Over all landscapes' "$STUDY-transfer.md" >&2
fi

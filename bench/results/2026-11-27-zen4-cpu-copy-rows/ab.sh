#!/bin/bash
# A/B of two bench builds' untuned defaults, alternately, on ResNet-50 and the unseen convolutions.
# ab.sh OLD_BENCH NEW_BENCH OUTDIR [PAIRS]: one trial (the default) per kernel, a fresh cache per run.
set -e
old=$1; new=$2; out=$3; pairs=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for k in $(seq 1 "$pairs"); do for b in old new; do
  B=$old; [ $b = new ] && B=$new
  TENSOR_DSL_CACHE=$(mktemp -d) "$B" --suite resnet50_conv2d --device cpu --trials 1 --seed 1 \
    --omp-wait-policy inherit --workloads "$here/ab-workloads.json" --json "$out/ab-$b-$k.json" > /dev/null 2>&1
done; done

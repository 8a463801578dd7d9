#!/bin/bash
# compare.sh KERNEL SHAPES FLOPS N0 N1 NOUT [DTYPES]: the untuned default and the same config
# with the previous default's tile (vector=32;unroll=8), generated C (`tensor-dsl emit`),
# timed by hm.c interleaved call block by call block with an FMA loop at the machine's peak
# (peak.c), prepacked and with the panel packed at each call (NOPP=1). Sizes as hm takes them
# (a trailing b: a bf16 buffer). Needs `cargo build --release -p tensor-dsl-cli` and
# `cc -O2 -o hm hm.c -ldl` here.
set -e
T=${T:-../../../target/release/tensor-dsl}
K=$1; SH=$2; FL=$3; shift 3; N0=$1; N1=$2; NO=$3; DT=${4:+--dtypes $4}
W=$(mktemp -d)
PEAK=$FL; case "$N0" in *b) PEAK=$((FL/2));; esac  # bf16: vdpbf16ps runs 2x the f32 FMA rate
cc -O3 -fPIC -shared -march=native -fopenmp -DPEAK_FLOPS=${PEAK}L peak.c -o $W/peak.so
$T emit --kernel "$K" --shapes $SH $DT --out $W/new >/dev/null
cfg=$(python3 -c "import json;print(json.load(open('$W/new/config_0000.json'))['config'])")
old=$(echo "$cfg" | sed 's/vector=[0-9]*/vector=32/; s/unroll=[0-9]*/unroll=8/')
$T emit --kernel "$K" --shapes $SH $DT --configs "config:$old" --out $W/old >/dev/null
for v in new old; do cc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp $W/$v/config_0000.c -o $W/$v.so; done
echo "## $K $SH $4"; echo "new: $cfg"; echo "old: $old"
for pp in "" 1; do echo "NOPP=${pp:-0}"; NOPP=$pp OMP_NUM_THREADS=2 ./hm $FL $N0 $N1 $NO -- $W/peak.so $W/old.so $W/new.so | sed "s|$W/||"; done
rm -rf $W

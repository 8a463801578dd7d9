#!/bin/bash
# configs.sh NAME N C H W F R S STRIDE PAD CONFIG... : the bf16 default and each CONFIG of the
# NCHW convolution (generated C, `tensor-dsl emit`), timed side by side by the harness, three
# alternating rounds. Needs `cargo build --release -p tensor-dsl-cli` and
# `cc -O2 -o h3 harness_bf16.c -ldl`; T and H override the paths.
set -e
T=${T:-./target/release/tensor-dsl}
H=${H:-./h3}
name=$1; N=$2; C=$3; H=$4; W=$5; F=$6; R=$7; S=$8; st=$9; pd=${10}; shift 10
P=$(( (H + 2*pd - R)/st + 1 )); Q=$(( (W + 2*pd - S)/st + 1 ))
if [ $st = 1 ]; then ip="p + r"; iq="q + s"; else ip="$st * p + r"; iq="$st * q + s"; fi
if [ $pd != 0 ]; then ip="$ip - $pd"; iq="$iq - $pd"; fi
K="y[[n, f, p, q]] += x[[n, c, $ip, $iq]] * w[[f, c, r, s]]"
SH="x=${N}x${C}x${H}x${W},w=${F}x${C}x${R}x${S},y=${N}x${F}x${P}x${Q}"
flops=$(python3 -c "print(2*$N*$F*$P*$Q*$C*$R*$S)")
nx=$((N*C*H*W)); nw=$((F*C*R*S)); ny=$((N*F*P*Q))
rm -rf c_$name; mkdir -p c_$name; i=0
$T emit --kernel "$K" --shapes $SH --dtypes x=bf16,w=bf16 --out c_$name/d >/dev/null
cc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp c_$name/d/config_0000.c -o c_$name/d.so
echo "default: $(python3 -c "import json;print(json.load(open('c_$name/d/config_0000.json'))['config'])")"
for c in "$@"; do $T emit --kernel "$K" --shapes $SH --dtypes x=bf16,w=bf16 --configs "config:$c" --out c_$name/$i >/dev/null; cc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp c_$name/$i/config_0000.c -o c_$name/$i.so; echo "$i: $c"; i=$((i+1)); done
for round in 1 2 3; do line="default $(OMP_NUM_THREADS=2 $H c_$name/d.so $flops ${nx}b ${nw}b $ny)"; for j in $(seq 0 $((i-1))); do line="$line | $j: $(OMP_NUM_THREADS=2 $H c_$name/$j.so $flops ${nx}b ${nw}b $ny)"; done; echo "$line"; done

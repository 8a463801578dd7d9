#!/bin/bash
# cv.sh NAME KERNEL X W Y FLOPS CV cfg... : prepacked entries of each config ('default' or text), + dnnl
n=$1; K=$2; X=$3; W=$4; Y=$5; F=$6; export CV=$7 PFLOPS=$6; shift 7
nn() { echo $1 | tr 'x' '*' | bc; }
rm -rf cv_$n; mkdir cv_$n; i=0; libs=""
for c in "$@"; do
  if [ "$c" = default ]; then arg=default; else arg="config:$c"; fi
  /work/main/target/release/tensor-dsl emit --kernel "$K" --shapes x=$X,w=$W,y=$Y --configs "$arg" --out cv_$n/c$i >/dev/null || { echo "emit failed: $c"; continue; }
  grep -q td_kernel_prepacked cv_$n/c$i/config_0000.c || { echo "c$i: no prepacked entry"; }
  gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -DSRC="\"cv_$n/c$i/config_0000.c\"" -DWALL_ARG=3 wrap.c -o cv_$n/c$i.so || continue
  echo "c$i: $(grep -o '"config": "[^"]*"' cv_$n/c$i/config_0000.json)"; libs="$libs ./cv_$n/c$i.so"; i=$((i+1))
done
./chk $(nn $X) $(nn $W) $(nn $Y) $libs | tail -1
for r in 1 2; do OMP_NUM_THREADS=2 ROUNDS=${ROUNDS:-10} ./hm $F $(nn $X) $(nn $W) $(nn $Y) -- ./peak.so $libs ./dnnl.so 2>&1 | grep -v impl; done

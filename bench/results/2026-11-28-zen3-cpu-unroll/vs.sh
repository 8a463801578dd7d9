#!/bin/bash
# vs.sh NAME KERNEL X W Y FLOPS CV : default (scalar stores) vs the same config with conv_store=vector, + dnnl
n=$1; K=$2; X=$3; W=$4; Y=$5; F=$6; export CV=$7 PFLOPS=$6
nn() { echo $1 | tr 'x' '*' | bc; }
rm -rf vs_${n}_s vs_${n}_v; ./td_new emit --kernel "$K" --shapes x=$X,w=$W,y=$Y --configs default --out vs_${n}_s >/dev/null
cfg=$(grep -o '"config": "[^"]*"' vs_${n}_s/config_0000.json | sed 's/"config": "//; s/"$//'); echo "$n default: $cfg"
./td_new emit --kernel "$K" --shapes x=$X,w=$W,y=$Y --configs "config:${cfg/conv_store=scalar/conv_store=vector}" --out vs_${n}_v >/dev/null || { echo emit failed; exit 1; }
for v in s v; do gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -o vs_${n}_$v.so vs_${n}_$v/config_0000.c; done
grep -c td_store8 vs_${n}_v/config_0000.c
./chk $(nn $X) $(nn $W) $(nn $Y) ./vs_${n}_s.so ./vs_${n}_v.so
for i in 1 2; do OMP_NUM_THREADS=2 ROUNDS=${ROUNDS:-10} ./hm $F $(nn $X) $(nn $W) $(nn $Y) -- ./peak.so ./vs_${n}_s.so ./vs_${n}_v.so ./dnnl.so 2>&1 | grep -v impl; done

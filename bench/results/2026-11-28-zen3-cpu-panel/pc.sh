#!/bin/bash
# pc.sh NAME KERNEL SHAPES FLOPS n_in... n_out : old (td_new) vs new default, + openblas lib OB if set
n=$1; K=$2; S=$3; F=$4; shift 4
rm -rf pc_$n; mkdir -p pc_$n
./td_new emit --kernel "$K" --shapes $S --configs default --out pc_$n/old >/dev/null
/work/main/target/release/tensor-dsl emit --kernel "$K" --shapes $S --configs default --out pc_$n/new >/dev/null
for v in old new; do gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -o pc_$n/$v.so pc_$n/$v/config_0000.c; done
echo "$n: $(grep -o '"config": "[^"]*"' pc_$n/new/config_0000.json)"
./chk "$@" ./pc_$n/old.so ./pc_$n/new.so
export PFLOPS=$F
for i in 1 2; do OMP_NUM_THREADS=2 ROUNDS=${ROUNDS:-10} ./hm $F "$@" -- ./peak.so ./pc_$n/old.so ./pc_$n/new.so $OB 2>&1 | grep -v impl; done

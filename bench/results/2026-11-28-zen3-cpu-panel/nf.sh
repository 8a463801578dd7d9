#!/bin/bash
# nf.sh NAME KERNEL X W Y FLOPS CV OLD.so [cfg] : new default (or cfg) prepacked vs OLD + dnnl
n=$1; K=$2; X=$3; W=$4; Y=$5; F=$6; export CV=$7 PFLOPS=$6; old=$8; cfg=${9:-default}
nn() { echo $1 | tr 'x' '*' | bc; }
rm -rf nf/$n; [ "$cfg" = default ] && arg=default || arg="config:$cfg"
/work/main/target/release/tensor-dsl emit --kernel "$K" --shapes x=$X,w=$W,y=$Y --configs "$arg" --out nf/$n >/dev/null
echo "$n: $(grep -o '"config": "[^"]*"' nf/$n/config_0000.json) xtile: $(grep -c 'td_conv_xtile(' nf/$n/config_0000.c)"
gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -DSRC="\"nf/$n/config_0000.c\"" -DWALL_ARG=3 wrap.c -o nf/$n.so
gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp nf/$n/config_0000.c -o nf/${n}_plain.so
./chk $(nn $X) $(nn $W) $(nn $Y) $old ./nf/$n.so; ./chk $(nn $X) $(nn $W) $(nn $Y) $old ./nf/${n}_plain.so
for r in 1 2; do OMP_NUM_THREADS=2 ROUNDS=${ROUNDS:-10} ./hm $F $(nn $X) $(nn $W) $(nn $Y) -- ./peak.so $old ./nf/$n.so ./dnnl.so 2>&1 | grep -v impl; done

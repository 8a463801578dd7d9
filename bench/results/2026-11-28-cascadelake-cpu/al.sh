#!/bin/bash
# al.sh LAYER: the default config emitted by the old binary (tensor-dsl-old) and the new one, timed with
# hm_cold (BLOCK 1 and 10) with x and y 16 bytes past a page (as a Vec) and 64-byte aligned.
L=$1
. ./layer.sh
mkdir -p al_$L
for b in old new; do
  bin=/work/main/target/release/tensor-dsl; [ $b = old ] && bin=./tensor-dsl-old
  rm -rf al_$L/$b; $bin emit --kernel "$CK" --shapes x=1x${C}x${H}x${W},w=${F}x${C}x${R}x${S},y=1x${F}x${P}x${Q} --configs default --out al_$L/$b >/dev/null
  gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -DSRC="\"al_$L/$b/config_0000.c\"" -DWALL_ARG=3 wrap.c -o al_$L/$b.so
done
echo "## $L $(./chk $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) al_$L/old.so al_$L/new.so) default: $def"
export CV=1,$C,$H,$W,$F,$R,$S,$st,$pad PFLOPS=$((2*F*C*R*S*P*Q))
for i in ${REPS:-1 2}; do for o in 16,0,16 0,0,0; do for b in ${BLOCKS:-1 10}; do
echo "$o BLOCK=$b: $(OFFS=$o OMP_NUM_THREADS=2 BLOCK=$b ROUNDS=${ROUNDS:-8} ./hm_cold $PFLOPS $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) -- ./peak.so al_$L/old.so al_$L/new.so ./dnnl.so 2>&1 | grep GFLOPS | awk '{print $1, $8}' | sed "s|al_$L/||g" | paste -sd' ')"
done; done; done

#!/bin/bash
# ur.sh LAYER: the default's generated C (u0) against it with the window rows' loop not unrolled (u1), hm_cold,
# buffers 16 bytes past a page and aligned, BLOCK 1 and 10.
L=$1; . ./layer.sh >/dev/null
mkdir -p ur_$L; cp ${L}_default/config_0000.c ur_$L/u0.c
python3 - ur_$L <<'PY'
import sys; d=sys.argv[1]; s=open(d+'/u0.c').read()
a=s.replace("        #pragma GCC unroll 3\n        for (long i_r","        #pragma GCC unroll 1\n        for (long i_r")
assert a!=s; open(d+'/u1.c','w').write(a)
PY
for v in u0 u1; do gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -DSRC="\"$PWD/ur_$L/$v.c\"" -DWALL_ARG=3 wrap.c -o ur_$L/$v.so; done
echo "## $L $(./chk $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) ur_$L/u0.so ur_$L/u1.so | tail -1) default: $def"
export CV=1,$C,$H,$W,$F,$R,$S,$st,$pad PFLOPS=$((2*F*C*R*S*P*Q))
for o in 16,0,16 aligned; do for b in 1 10; do
 if [ $o = aligned ]; then unset OFFS; else export OFFS=$o; fi
 echo "$o BLOCK=$b: $(OMP_NUM_THREADS=2 BLOCK=$b ROUNDS=8 ./hm_cold $PFLOPS $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) -- ./peak.so ur_$L/u0.so ur_$L/u1.so ./dnnl.so 2>&1 | grep GFLOPS | awk '{print $1, $8}' | sed "s|ur_$L/||g" | paste -sd' ')"
done; done

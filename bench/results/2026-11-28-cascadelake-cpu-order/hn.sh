#!/bin/bash
# hn.sh LAYER: default emitted by HEAD (878ee14, c1) and by the working tree (c2), + dnnl, hm_cold
L=$1; . ./layer.sh
rm -rf hn_$L; mkdir hn_$L
./tensor-dsl-head emit --kernel "$CK" --shapes x=1x${C}x${H}x${W},w=${F}x${C}x${R}x${S},y=1x${F}x${P}x${Q} --configs default --out hn_$L/c1 >/dev/null
cp -r ${L}_default hn_$L/c2
for n in c1 c2; do gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -DSRC="\"hn_$L/$n/config_0000.c\"" -DWALL_ARG=3 wrap.c -o hn_$L/$n.so; done
echo "## $L $(./chk $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) hn_$L/c1.so hn_$L/c2.so | tail -1) $(cmp -s hn_$L/c1/config_0000.c hn_$L/c2/config_0000.c && echo SAME) default: $def"
export CV=1,$C,$H,$W,$F,$R,$S,$st,$pad PFLOPS=$((2*F*C*R*S*P*Q))
./hc.sh hn_$L

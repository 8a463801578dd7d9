#!/bin/bash
# po.sh LAYER: default (c2) against the default with the other conv_outer (c1), + dnnl, hm_cold
L=$1; . ./layer.sh
rm -rf po_$L; mkdir po_$L
alt=$(echo "$def" | sed 's/conv_outer=channels/conv_outer=X/; s/conv_outer=pixels/conv_outer=channels/; s/conv_outer=X/conv_outer=pixels/')
/work/main/target/release/tensor-dsl emit --kernel "$CK" --shapes x=1x${C}x${H}x${W},w=${F}x${C}x${R}x${S},y=1x${F}x${P}x${Q} --configs "config:$alt" --out po_$L/c1 >/dev/null
cp -r ${L}_default po_$L/c2
for n in c1 c2; do gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -DSRC="\"po_$L/$n/config_0000.c\"" -DWALL_ARG=3 wrap.c -o po_$L/$n.so; done
echo "## $L $(./chk $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) po_$L/c1.so po_$L/c2.so | tail -1) c1: $alt c2: $def"
export CV=1,$C,$H,$W,$F,$R,$S,$st,$pad PFLOPS=$((2*F*C*R*S*P*Q))
./hc.sh po_$L

#!/bin/bash
# kb.sh LAYER k1 k2 ... : the default and the default with conv_kblock=k for each k, side by side
L=$1; shift
read n F C H W R S st pad < <(grep "^$L " resnet.txt)
P=$(( (H + 2*pad - R) / st + 1 )); Q=$(( (W + 2*pad - S) / st + 1 ))
if [ $pad -gt 0 ]; then xi="$st * p + r - $pad, $st * q + s - $pad"; else xi="$st * p + r, $st * q + s"; fi
[ $st = 1 ] && xi=$(echo "$xi" | sed 's/1 \* //g')
CK="y[[n, f, p, q]] += x[[n, c, $xi]] * w[[f, c, r, s]]"
rm -rf kbd_$L; /work/main/target/release/tensor-dsl emit --kernel "$CK" --shapes x=1x${C}x${H}x${W},w=${F}x${C}x${R}x${S},y=1x${F}x${P}x${Q} --configs default --out kbd_$L >/dev/null
def=${BASE:-$(grep -o '"config": "[^"]*"' kbd_$L/config_0000.json | sed 's/"config": "//; s/"$//')}
cfgs=(default)
for k in "$@"; do cfgs+=("$(echo "$def" | sed "s/conv_kblock=[0-9]*/conv_kblock=$k/")"); done
echo "## $L default: $def"
ROUNDS=${ROUNDS:-8} ./cv.sh $L "$CK" 1x${C}x${H}x${W} ${F}x${C}x${R}x${S} 1x${F}x${P}x${Q} $((2*F*C*R*S*P*Q)) 1,$C,$H,$W,$F,$R,$S,$st,$pad "${cfgs[@]}" 2>&1 | grep -v "max abs\|usage"

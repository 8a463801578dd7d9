#!/bin/bash
# kb.sh LAYER k1 k2 ... : the default and the default with conv_kblock=k for each k, side by side
L=$1; shift
. "$(dirname "$0")/layer.sh"
def=${BASE:-$def}
cfgs=(default)
for k in "$@"; do cfgs+=("$(echo "$def" | sed "s/conv_kblock=[0-9]*/conv_kblock=$k/")"); done
echo "## $L default: $def"
ROUNDS=${ROUNDS:-8} ./cv.sh $L "$CK" 1x${C}x${H}x${W} ${F}x${C}x${R}x${S} 1x${F}x${P}x${Q} $((2*F*C*R*S*P*Q)) 1,$C,$H,$W,$F,$R,$S,$st,$pad "${cfgs[@]}" 2>&1 | grep -v "max abs\|usage"

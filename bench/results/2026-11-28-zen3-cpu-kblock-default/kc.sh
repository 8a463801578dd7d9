#!/bin/bash
# kc.sh LAYER cfg... : the default and each config text ("d:s/a/b/" edits the default with sed), hm_cold BLOCK=1 and 10
L=$1; shift
. "$(dirname "$0")/layer.sh"
cfgs=(default)
for c in "$@"; do case "$c" in d:*) cfgs+=("$(echo "$def" | sed "${c#d:}")");; *) cfgs+=("$c");; esac; done
echo "## $L default: $def"
ROUNDS=1 ./cv.sh $L "$CK" 1x${C}x${H}x${W} ${F}x${C}x${R}x${S} 1x${F}x${P}x${Q} $((2*F*C*R*S*P*Q)) 1,$C,$H,$W,$F,$R,$S,$st,$pad "${cfgs[@]}" 2>&1 | grep "^c[0-9]\|emit"
export CV=1,$C,$H,$W,$F,$R,$S,$st,$pad PFLOPS=$((2*F*C*R*S*P*Q))
libs=$(ls cv_$L/c*.so | sort -V)
for b in ${BLOCKS:-1 10 1 10}; do echo "T${T:-2} BLOCK=$b: $(OMP_NUM_THREADS=${T:-2} BLOCK=$b ROUNDS=${ROUNDS:-8} ./hm_cold $((2*F*C*R*S*P*Q)) $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) -- ./peak.so $libs ./dnnl.so 2>&1 | grep GFLOPS | awk '{print $1, $8}' | sed "s|./cv_$L/||" | paste -sd' ')"; done

#!/bin/bash
# ao.sh LAYER cfg...: like kc.sh, timed with buffers aligned and 16 bytes past a page (as a Vec), BLOCK 10
L=$1; shift
. ./layer.sh
cfgs=(default)
for c in "$@"; do case "$c" in d:*) cfgs+=("$(echo "$def" | sed "${c#d:}")");; *) cfgs+=("$c");; esac; done
echo "## $L default: $def"
ROUNDS=1 ./cv.sh $L "$CK" 1x${C}x${H}x${W} ${F}x${C}x${R}x${S} 1x${F}x${P}x${Q} $((2*F*C*R*S*P*Q)) 1,$C,$H,$W,$F,$R,$S,$st,$pad "${cfgs[@]}" 2>&1 | grep "^c[0-9]\|emit\|max"
export CV=1,$C,$H,$W,$F,$R,$S,$st,$pad PFLOPS=$((2*F*C*R*S*P*Q))
libs=$(ls cv_$L/c*.so | sort -V)
for r in ${REPS:-1 2}; do for o in 16,0,16 aligned; do
 if [ $o = aligned ]; then unset OFFS; else export OFFS=$o; fi
 echo "$o B${BLOCK:-10}: $(OMP_NUM_THREADS=${T:-2} BLOCK=${BLOCK:-10} ROUNDS=${ROUNDS:-8} ./hm_cold $PFLOPS $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) -- ./peak.so $libs ./dnnl.so 2>&1 | grep GFLOPS | awk '{print $1, $8}' | sed "s|./cv_$L/||" | paste -sd' ')"
done; done

#!/bin/bash
# hc.sh DIR: time DIR/c*.so + dnnl with hm_cold, OFFS Vec-like and aligned, BLOCK 1 and 10, THREADS (default 2)
d=$1; libs=$(ls ./$d/c*.so | sort -V | tr '\n' ' ')
read n C H W F R S st pad < <(echo $CV | tr ',' ' ')
P=$(( (H + 2*pad - R) / st + 1 )); Q=$(( (W + 2*pad - S) / st + 1 ))
for i in ${REPS:-1 2}; do for o in 16,0,16 0,0,0; do for b in ${BLOCKS:-1 10}; do
echo "$o B=$b T=${T:-2}: $(OFFS=$o OMP_NUM_THREADS=${T:-2} BLOCK=$b ROUNDS=${ROUNDS:-8} ./hm_cold $PFLOPS $((C*H*W)) $((F*C*R*S)) $((F*P*Q)) -- ./peak.so $libs ./dnnl.so 2>&1 | grep GFLOPS | awk '{print $1, $8}' | sed "s|./$d/||g; s|./||g; s|.so||g" | paste -sd' ')"
done; done; done

#!/bin/bash
# Real-run tuner study: droplet at 32 and 64 trials, seeds 1-3, each run cold (own records
# file, empty cache); best-known from a 256-trial random search. Idle machine, both cores.
cd /work/main
T=target/release/tensor-dsl
declare -A K S
K[mm]='c[[i, j]] += a[[i, k]] * b[[k, j]]'; S[mm]='a=384x768,b=768x320,c=384x320'
K[conv]='y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]'; S[conv]='x=1x128x28x28,w=128x128x3x3,y=1x128x28x28'
K[bmm]='o[[b, m, n]] += x[[b, m, k]] * y[[b, k, n]]'; S[bmm]='x=24x200x64,y=24x64x200,o=24x200x200'
for w in mm conv bmm; do
  for t in 32 64; do for seed in 1 2 3; do
    R=$(mktemp -u /tmp/rr/rec.XXXX.jsonl)
    TENSOR_DSL_CACHE=$(mktemp -d /tmp/rr/cache.XXXX) $T tune --kernel "${K[$w]}" --shapes "${S[$w]}" --trials $t --seed $seed --records $R --json > /tmp/rr/$w-$t-$seed.json 2>/dev/null
    echo "$w $t $seed $(python3 -c "import json;d=json.load(open('/tmp/rr/$w-$t-$seed.json'));print(round(d['best_gflops'],1), d['valid_trials'], round(d['tune_seconds'],1), d['best_config'])")"
  done; done
  R=$(mktemp -u /tmp/rr/rec.XXXX.jsonl)
  TENSOR_DSL_CACHE=$(mktemp -d /tmp/rr/cache.XXXX) $T tune --kernel "${K[$w]}" --shapes "${S[$w]}" --trials 256 --strategy random --seed 7 --records $R --json > /tmp/rr/$w-random.json 2>/dev/null
  echo "$w random256 $(python3 -c "import json;d=json.load(open('/tmp/rr/$w-random.json'));print(round(d['best_gflops'],1), d['valid_trials'], round(d['tune_seconds'],1), d['best_config'])")"
done

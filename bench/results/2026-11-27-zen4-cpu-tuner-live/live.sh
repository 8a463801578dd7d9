#!/bin/bash
# live.sh CLI OUT_DIR: the tuner's acceptance check, live. For three shapes no suite tunes
# (a matmul, a convolution, a batched matmul): `tensor-dsl tune` with seeds 1-3 at 32 and
# 64 trials (the default strategy, each run with a fresh cache and records file: nothing to
# learn from), and a 256-trial random search (seed 7) for the best-known point. Then every
# distinct final configuration of a shape is emitted, compiled as the runtime compiles it
# and timed interleaved, 10 calls at a time, with an FMA loop of the same flop count
# (../2026-11-27-zen4-cpu-wide-tile/hm.c, peak.c): each run's ratio is its configuration's
# median over the fastest configuration's.
set -e
cli=$1; out=$2; mkdir -p "$out"; out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd); tools=$here/../2026-11-27-zen4-cpu-wide-tile
[ -x "$out/hm" ] || cc -O2 -o "$out/hm" "$tools/hm.c" -ldl
# name | kernel | shapes | flops | sizes for hm | --constant | NOPP (packed at each call)
cat > "$out/shapes.txt" <<'S'
mm|c[[i,j]] += a[[i,k]] * b[[k,j]]|a=768x640,b=640x192,c=768x192|188743680|491520 122880 147456||1
conv|y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]|x=1x96x20x20,w=128x96x3x3,y=1x128x20x20|88473600|38400 110592 51200|w|
bmm|c[[z,i,j]] += a[[z,i,k]] * b[[z,k,j]]|a=32x96x160,b=32x160x80,c=32x96x80|78643200|491520 409600 245760||1
S
while IFS='|' read -r name kernel shapes flops sizes constant nopp; do
  for t in 32 64; do for seed in 1 2 3; do
    TENSOR_DSL_CACHE=$(mktemp -d) "$cli" tune --kernel "$kernel" --shapes "$shapes" --trials $t --seed $seed \
      --records "$out/$name-t$t-s$seed.jsonl" ${constant:+--constant $constant} --json > "$out/$name-t$t-s$seed.json"
  done; done
  TENSOR_DSL_CACHE=$(mktemp -d) "$cli" tune --kernel "$kernel" --shapes "$shapes" --trials 256 --seed 7 --strategy random \
    --records "$out/$name-random256.jsonl" ${constant:+--constant $constant} --json > "$out/$name-random256.json"
  cfgs=$(python3 -c "
import json,glob
seen=[]
for f in sorted(glob.glob('$out/$name-*.json')):
    c=json.load(open(f))['best_config']
    if c not in seen: seen.append(c)
print('\n'.join(seen))")
  libs=(); i=0
  cc -O3 -fPIC -shared -march=native -fopenmp -DPEAK_FLOPS=${flops}L "$tools/peak.c" -o "$out/peak_$name.so"
  : > "$out/$name-configs.txt"
  while read -r c; do
    rm -rf "$out/e_${name}_$i"; "$cli" emit --kernel "$kernel" --shapes "$shapes" --configs "config:$c" --out "$out/e_${name}_$i" > /dev/null
    cc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp "$out/e_${name}_$i/config_0000.c" -o "$out/${name}_$i.so"
    echo "$i $c" >> "$out/$name-configs.txt"; libs+=("$out/${name}_$i.so"); i=$((i+1))
  done <<< "$cfgs"
  (cd "$out" && if [ -n "$nopp" ]; then export NOPP=1; fi; OMP_NUM_THREADS=2 ROUNDS=30 ./hm "$flops" $sizes -- "$out/peak_$name.so" "${libs[@]}" > "$out/$name-hm.txt")
  cat "$out/$name-configs.txt" "$out/$name-hm.txt"
done < "$out/shapes.txt"

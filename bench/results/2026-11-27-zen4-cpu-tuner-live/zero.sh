#!/bin/bash
# zero.sh CLI OUT_DIR LIVE_DIR: the zero-trial pick, live. For each kernel of LIVE_DIR's
# shapes.txt (live.sh), two other shapes of the same kernel are tuned (32 trials, seed 1)
# into a fresh cache; then `tensor-dsl tune --trials 0` picks a point for the shape of
# live.sh from those records, without measuring. The pick is emitted and timed
# interleaved with the fastest configuration live.sh found for that shape (its
# `*-configs.txt`, `*-hm.txt`).
set -e
cli=$1; out=$2; live=$3; mkdir -p "$out"; out=$(cd "$out" && pwd); live=$(cd "$live" && pwd)
here=$(cd "$(dirname "$0")" && pwd); tools=$here/../2026-11-27-zen4-cpu-wide-tile
[ -x "$out/hm" ] || cc -O2 -o "$out/hm" "$tools/hm.c" -ldl
declare -A others=(
  [mm]="a=512x768,b=768x256,c=512x256 a=1024x512,b=512x128,c=1024x128"
  [conv]="x=1x64x28x28,w=96x64x3x3,y=1x96x28x28 x=1x128x14x14,w=160x128x3x3,y=1x160x14x14"
  [bmm]="a=16x128x128,b=16x128x64,c=16x128x64 a=48x64x256,b=48x256x96,c=48x64x96"
)
while IFS='|' read -r name kernel shapes flops sizes constant nopp; do
  cache=$(mktemp -d)
  for s in ${others[$name]}; do
    TENSOR_DSL_CACHE=$cache "$cli" tune --kernel "$kernel" --shapes "$s" --trials 32 --seed 1 ${constant:+--constant $constant} --json > /dev/null
  done
  TENSOR_DSL_CACHE=$cache "$cli" tune --kernel "$kernel" --shapes "$shapes" --trials 0 ${constant:+--constant $constant} --json > "$out/$name-zero.json"
  pick=$(python3 -c "import json; print(json.load(open('$out/$name-zero.json'))['best_config'])")
  best=$(python3 - "$live" "$name" <<'PY'
import re, sys
live, name = sys.argv[1], sys.argv[2]
idx = dict(l.strip().split(" ", 1) for l in open(f"{live}/{name}-configs.txt"))
med = {m.group(1): float(m.group(2)) for l in open(f"{live}/{name}-hm.txt") for m in [re.search(rf"{name}_(\d+)\.so\s+GFLOPS.*p50\s+([\d.]+)", l)] if m}
print(idx[max(med, key=med.get)])
PY
)
  printf '0 %s\n1 %s\n' "$pick" "$best" > "$out/$name-configs.txt"
  cc -O3 -fPIC -shared -march=native -fopenmp -DPEAK_FLOPS=${flops}L "$tools/peak.c" -o "$out/peak_$name.so"
  libs=()
  for i in 0 1; do
    c=$pick; [ $i = 1 ] && c=$best
    rm -rf "$out/e_${name}_$i"; "$cli" emit --kernel "$kernel" --shapes "$shapes" --configs "config:$c" --out "$out/e_${name}_$i" > /dev/null
    cc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp "$out/e_${name}_$i/config_0000.c" -o "$out/${name}_$i.so"
    libs+=("$out/${name}_$i.so")
  done
  (cd "$out" && if [ -n "$nopp" ]; then export NOPP=1; fi; OMP_NUM_THREADS=2 ROUNDS=30 ./hm "$flops" $sizes -- "$out/peak_$name.so" "${libs[@]}" > "$out/$name-hm.txt")
  echo "== $name: 0 = the zero-trial pick, 1 = live.sh's fastest"; cat "$out/$name-configs.txt" "$out/$name-hm.txt"
done < "$live/shapes.txt"

#!/usr/bin/env bash
# Our tuner against Apache TVM MetaSchedule, same trial budget, one shape after the other
# (issue 11: "64 trials at 512³ and at 512×64×1024 beat TVM MetaSchedule's 64-trial result
# in less time"). See bench/README.md, "TVM MetaSchedule".
#
#   bench/tvm/compare.sh --out DIR [--shapes 512x512x512,512x64x1024] [--trials 64]
#                        [--seed 1] [--strategy S] [--tvm-timeout SECONDS]
#
# Shapes are MxNxK: c (M×N) = a (M×K) · b (K×N), f32, row-major. For each shape, first
#   ours: $TENSOR_DSL_BIN tune --kernel 'c[[i,j]] += a[[i,k]] * b[[k,j]]' --shapes ...
#         --device cpu --trials N --seed S --json, with a fresh, empty TENSOR_DSL_CACHE and
#         records file (nothing tuned earlier helps);
#   TVM:  $TVM_PYTHON bench/tvm/tvm_metaschedule.py M N K --trials N --seed S (tune_tir with
#         TVM's defaults; see that script);
# then writes DIR/compare.md (a table, the machine, the commands) and every raw JSON
# (DIR/ours_MxNxK.json, DIR/tvm_MxNxK.json). Both use every core this process may run on
# (run the script under `taskset -c ...` to use fewer).
#
# Environment: TENSOR_DSL_BIN (default target/release/tensor-dsl; build it first with
# `cargo build --release -p tensor-dsl-cli`), TVM_PYTHON (default python3; an interpreter
# with apache-tvm, see bench/README.md), plus whatever the two tools read (OMP_WAIT_POLICY
# for ours: unset, libgomp's default, is what a user gets).
#
# It is a benchmark: run it on an idle machine, nothing else running. 64 trials of each
# tool at the two default shapes should take about 5–10 minutes on 2 cores (an estimate:
# ours took 12–17 s per shape on an idle 2-core machine; TVM's time there is not measured).
set -euo pipefail

invocation="$0 $*"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=""
shapes="512x512x512,512x64x1024"
trials=64
seed=1
strategy=""
tvm_timeout=""

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --shapes) shapes=$2; shift 2 ;;
        --trials) trials=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --strategy) strategy=$2; shift 2 ;;
        --tvm-timeout) tvm_timeout=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare.sh: unknown argument $1" >&2; usage >&2; exit 1 ;;
    esac
done
if [ -z "$out" ]; then
    echo "compare.sh: --out DIR is required" >&2
    exit 1
fi
bin=${TENSOR_DSL_BIN:-$root/target/release/tensor-dsl}
tvm_python=${TVM_PYTHON:-python3}
if [ ! -x "$bin" ]; then
    echo "compare.sh: no $bin (cargo build --release -p tensor-dsl-cli, or set TENSOR_DSL_BIN)" >&2
    exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tvm-compare.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

now() { date +%s.%N; }
kernel='c[[i,j]] += a[[i,k]] * b[[k,j]]'
# The lines of compare.md's "Commands" section, filled as we go.
: > "$scratch/commands"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
IFS=',' read -r -a shape_list <<< "$shapes"
for shape in "${shape_list[@]}"; do
    IFS='x' read -r m n k <<< "$shape"
    if ! [[ "$m" =~ ^[0-9]+$ && "$n" =~ ^[0-9]+$ && "$k" =~ ^[0-9]+$ ]]; then
        echo "compare.sh: shape $shape is not MxNxK" >&2
        exit 1
    fi
    name="${m}x${n}x${k}"

    # Ours, cold: a fresh cache (records and compiled objects) and records file.
    cold="$scratch/$name"
    mkdir -p "$cold/cache"
    ours_cmd=("$bin" tune --kernel "$kernel" --shapes "a=${m}x${k},b=${k}x${n},c=${m}x${n}"
        --device cpu --trials "$trials" --seed "$seed" --records "$cold/records.jsonl" --json)
    if [ -n "$strategy" ]; then ours_cmd+=(--strategy "$strategy"); fi
    echo "compare.sh: $name: ours (${trials} trials)..." >&2
    t0=$(now)
    ours_rc=0
    TENSOR_DSL_CACHE="$cold/cache" "${ours_cmd[@]}" > "$out/ours_$name.json" || ours_rc=$?
    t1=$(now)
    echo "$name ours_rc=$ours_rc ours_start=$t0 ours_end=$t1" >> "$scratch/walls"
    echo "TENSOR_DSL_CACHE=<empty folder> $bin tune --kernel '$kernel'" \
        "--shapes a=${m}x${k},b=${k}x${n},c=${m}x${n} --device cpu --trials $trials --seed $seed" \
        "--records <empty file> --json${strategy:+ --strategy $strategy}" >> "$scratch/commands"

    # TVM MetaSchedule.
    tvm_cmd=("$tvm_python" "$here/tvm_metaschedule.py" "$m" "$n" "$k" --trials "$trials"
        --seed "$seed" --json "$out/tvm_$name.json")
    if [ -n "$tvm_timeout" ]; then tvm_cmd+=(--timeout "$tvm_timeout"); fi
    echo "compare.sh: $name: TVM MetaSchedule (${trials} trials)..." >&2
    t0=$(now)
    tvm_rc=0
    "${tvm_cmd[@]}" || tvm_rc=$?
    t1=$(now)
    echo "$name tvm_rc=$tvm_rc tvm_start=$t0 tvm_end=$t1" >> "$scratch/walls"
    echo "${tvm_cmd[*]}" >> "$scratch/commands"
    if [ "$tvm_rc" = 2 ]; then
        echo "compare.sh: TVM is not usable with $tvm_python (see above): its columns stay empty" >&2
    fi
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cores=$(nproc)
python3 - "$out" "$scratch/walls" "$scratch/commands" "$shapes" "$trials" "$seed" \
    "$cpu" "$cores" "$invocation" "$load_before" "$load_after" <<'EOF'
import datetime, json, os, sys

(out, walls_file, commands_file, shapes, trials, seed, cpu, cores, invocation,
 load_before, load_after) = sys.argv[1:]
walls = {}
for line in open(walls_file):
    name, *pairs = line.split()
    for pair in pairs:
        key, value = pair.split("=")
        walls.setdefault(name, {})[key] = float(value)
for w in walls.values():
    for tool in ("ours", "tvm"):
        if f"{tool}_end" in w:
            w[f"{tool}_wall"] = w[f"{tool}_end"] - w[f"{tool}_start"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def num(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) else "–"


rows = []
notes = []
for shape in shapes.split(","):
    m, n, k = shape.split("x")
    name = f"{m}x{n}x{k}"
    w = walls.get(name, {})
    ours = load(os.path.join(out, f"ours_{name}.json")) or {}
    tvm = load(os.path.join(out, f"tvm_{name}.json")) or {}
    if w.get("ours_rc", 0) != 0:
        notes.append(f"{name}: ours exited {int(w['ours_rc'])}")
    if w.get("tvm_rc", 0) == 2:
        notes.append(f"{name}: TVM skipped: {tvm.get('error', 'not installed or not usable')}")
    elif w.get("tvm_rc", 0) != 0:
        notes.append(f"{name}: TVM failed: {tvm.get('error', 'exit %d' % w['tvm_rc'])}")
    o_g, o_s = ours.get("best_gflops"), ours.get("tune_seconds")
    t_g, t_s = tvm.get("tuned_gflops"), tvm.get("tune_seconds")
    t_re = tvm.get("best_gflops")
    ratio = o_g / t_g if o_g and t_g else None
    ratio_re = o_g / t_re if o_g and t_re else None
    time_ratio = t_s / o_s if o_s and t_s else None
    beat = None
    if ratio is not None and time_ratio is not None:
        beat = "yes" if ratio > 1 and time_ratio > 1 else "no"
    rows.append(
        f"| {m}×{n}×{k} | {ours.get('trials', '–')} ({ours.get('valid_trials', '–')}) "
        f"| {num(o_s, '.1f')} ({num(w.get('ours_wall'), '.1f')}) | {num(o_g, '.1f')} "
        f"| {tvm.get('trials', '–')} ({tvm.get('valid_trials', '–')}) "
        f"| {num(t_s, '.1f')} (+{num(tvm.get('setup_seconds'), '.1f')}; {num(w.get('tvm_wall'), '.1f')}) "
        f"| {num(t_g, '.1f')} / {num(t_re, '.1f')} "
        f"| {num(ratio, '.2f')} / {num(ratio_re, '.2f')} | {num(time_ratio, '.2f')} | {beat or '–'} |"
    )

tvm_reports = [load(os.path.join(out, f"tvm_{s}.json")) for s in shapes.split(",")]
tvm_any = next((r for r in tvm_reports if r and r.get("status") != "skipped"), None)
tvm_desc = "not run"
if tvm_any:
    tvm_desc = (
        f"{tvm_any.get('tvm_version')}, target `{tvm_any.get('target')}`, "
        f"{tvm_any.get('threads')} threads, cost model {tvm_any.get('tuning', {}).get('cost_model')}"
    )
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
omp = os.environ.get("OMP_WAIT_POLICY", "unset (libgomp's default)")
with open(commands_file) as f:
    commands = f.read().strip()
text = f"""# tensor-dsl tune against TVM MetaSchedule, {trials} trials each

- date: {date}
- machine: {cpu}, {cores} cores available (`nproc`); load average (1, 5, 15 min)
  {load_before} before and {load_after} after (this run's own load included). **This is a
  benchmark: the numbers mean something only if the machine was otherwise idle** (nothing
  else running) during the run
- ours: `tensor-dsl tune --device cpu`, seed {seed}, a fresh empty cache and records file
  per shape; `OMP_WAIT_POLICY` {omp}
- TVM: {tvm_desc}; `tune_tir` with its defaults (see `bench/tvm/tvm_metaschedule.py`)
- invocation: `{invocation}`

| shape M×N×K | ours: trials (valid) | ours: tuning s (process wall) | ours: best GFLOPS | TVM: trials (valid) | TVM: tuning s (+ loading TVM; process wall) | TVM: best GFLOPS, tuning / re-timed | ours / TVM GFLOPS (vs tuning / re-timed) | TVM time / ours | ours better and faster? |
|---|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + """

- **Tuning s**: each tool's own wall clock of the whole search, every build and measurement
  included (ours: `tune_seconds` of `tensor-dsl tune --json`; TVM: from the `tune_tir` call
  to the best schedule compiled). Loading TVM's Python modules (its tensor intrinsics take
  a while to parse) comes before that and is shown apart; the process wall is each command
  from start to exit.
- **Best GFLOPS** is each tuner's own measurement of its best candidate while tuning (ours:
  median of repeats in the measurer; TVM: its local runner, `EvaluatorConfig()` defaults);
  TVM's best is also re-timed after tuning (`time_evaluator`, median of 21 repeats of at
  least 100 ms, output checked against numpy).
- Ratios above 1 are in our favour; "ours better and faster" uses TVM's tuning figure.
"""
if notes:
    text += "\nNotes:\n\n" + "\n".join(f"- {x}" for x in notes) + "\n"
text += "\n## Commands\n\n```sh\n" + commands + "\n```\n\nRaw JSON: `ours_*.json`, `tvm_*.json` beside this file.\n"
with open(os.path.join(out, "compare.md"), "w") as f:
    f.write(text)
print(text)
EOF

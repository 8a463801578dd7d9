"""summarize.py OUT_DIR: each run's final configuration's interleaved median over the fastest
configuration's (live.sh), per shape: 32- and 64-trial runs, their spread across seeds."""
import glob, json, os, re, sys
out = sys.argv[1]
for name in ["mm", "conv", "bmm"]:
    idx = {}
    for line in open(f"{out}/{name}-configs.txt"):
        i, c = line.strip().split(" ", 1)
        idx[c] = int(i)
    med = {}
    for line in open(f"{out}/{name}-hm.txt"):
        m = re.search(rf"{name}_(\d+)\.so\s+GFLOPS.*p50\s+([\d.]+)", line)
        if m:
            med[int(m.group(1))] = float(m.group(2))
    best = max(med.values())
    print(f"{name}: fastest {best:.1f} GFLOPS (interleaved medians)")
    for f in sorted(glob.glob(f"{out}/{name}-*.json")):
        r = json.load(open(f))
        i = idx[r["best_config"]]
        print(f"  {os.path.basename(f):22s} trials {r.get('trials')!s:>4} tuner {r['best_gflops']:6.1f}  config {i}: {med[i]:6.1f} = {med[i] / best:.3f} of the fastest")
    for t in (32, 64):
        rs = [med[idx[json.load(open(f))["best_config"]]] / best for f in sorted(glob.glob(f"{out}/{name}-t{t}-s*.json"))]
        print(f"  {t} trials: min {min(rs):.3f}, spread {max(rs) - min(rs):.3f}")

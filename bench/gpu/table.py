#!/usr/bin/env python3
"""Markdown tables from GPU bench JSON files (what the results READMEs under bench/results/
show): one row per kernel, then the geomean of ours/baseline and of default/baseline.

    python3 bench/gpu/table.py bench/results/.../2026-11-26-cuda-bert_matmul.json [...]
"""
import json
import math
import sys


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def table(paths):
    head = ("| kernel | shape (tensors) | GFLOP | ours GFLOPS | baseline GFLOPS | ours/baseline "
            "| default GFLOPS | default/baseline | trials (valid) | tune s | best config |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    rows, ours, default = [head], [], []
    for path in paths:
        for r in json.load(open(path))["results"]:
            name = f"{r['suite']}/{r['name']}"
            if r.get("status") != "ok":
                rows.append(f"| {name} | | | | | | | | | | {r.get('status')} |")
                continue
            base = r["baseline_gflops"]
            o, d = r["ours_gflops"] / base, r["default_gflops"] / base
            ours.append(o)
            default.append(d)
            shapes = json.dumps(r["tensor_shapes"]).replace(" ", "").replace(",", ", ")
            rows.append(
                f"| {name} | {shapes} | {r['flops'] / 1e9:.2f} | {r['ours_gflops']:.0f} | {base:.0f} "
                f"| {o:.2f} | {r['default_gflops']:.0f} | {d:.2f} | {r['trials']} ({r['valid_trials']}) "
                f"| {r['tune_seconds']:.0f} | `{r['best_config']}` |")
    if ours:
        rows.append("")
        rows.append(f"Geomean ours/baseline {geomean(ours):.2f} ({min(ours):.2f} – {max(ours):.2f}); "
                    f"untuned default/baseline {geomean(default):.2f} ({min(default):.2f} – {max(default):.2f}).")
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(table(sys.argv[1:]))

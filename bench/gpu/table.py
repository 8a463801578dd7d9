#!/usr/bin/env python3
"""Markdown tables from GPU bench JSON files (what the results READMEs under bench/results/
show): one row per kernel, then the geomean of ours/baseline and of default/baseline. A
kernel no library computes (`-` for the baseline) is left out of the geomeans. Beside a
`stages` JSON, run.sh's PyTorch timings (`*-stages-torch.json`) give a second table, of
times.

    python3 bench/gpu/table.py bench/results/.../2026-11-26-cuda-bert_matmul.json [...]
"""
import glob
import json
import math
import os
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
            shapes = json.dumps(r["tensor_shapes"]).replace(" ", "").replace(",", ", ")
            if base:
                o, d = r["ours_gflops"] / base, r["default_gflops"] / base
                ours.append(o)
                default.append(d)
                base, o, d = f"{base:.0f}", f"{o:.2f}", f"{d:.2f}"
            else:
                base, o, d = "-", "-", "-"
            rows.append(
                f"| {name} | {shapes} | {r['flops'] / 1e9:.2f} | {r['ours_gflops']:.0f} | {base} "
                f"| {o} | {r['default_gflops']:.0f} | {d} | {r['trials']} ({r['valid_trials']}) "
                f"| {r['tune_seconds']:.0f} | `{r['best_config']}` |")
    if ours:
        rows.append("")
        rows.append(f"Geomean ours/baseline {geomean(ours):.2f} ({min(ours):.2f} – {max(ours):.2f}); "
                    f"untuned default/baseline {geomean(default):.2f} ({min(default):.2f} – {max(default):.2f}).")
    for path in paths:
        for torch in glob.glob(os.path.join(os.path.dirname(path) or ".", "*-stages-torch.json")):
            rows.append("")
            rows.append(torch_table(path, torch))
    return "\n".join(rows)


def torch_table(path, torch_path):
    """Microseconds per call: ours, our default, cuDNN and PyTorch, and ours against each."""
    torch = json.load(open(torch_path))
    t = {r["name"]: r["seconds"] for r in torch["results"]}
    us = lambda s: f"{s * 1e6:.2f}" if s else "-"
    rows = [f"Times in µs (PyTorch {torch['torch']}, `{os.path.basename(torch_path)}`):", "",
            "| kernel | ours | default | cuDNN | PyTorch | PyTorch/ours | cuDNN/ours |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for r in json.load(open(path))["results"]:
        if r.get("status") != "ok":
            continue
        o, b, p = r["ours_seconds"], r["baseline_seconds"], t.get(r["name"])
        d = r["flops"] / r["default_gflops"] / 1e9
        rows.append(f"| {r['name']} | {us(o)} | {us(d)} | {us(b)} | {us(p)} "
                    f"| {f'{p / o:.2f}' if p else '-'} | {f'{b / o:.2f}' if b else '-'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(table(sys.argv[1:]))

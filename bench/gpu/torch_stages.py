#!/usr/bin/env python3
"""PyTorch on the GPU for the bench's `stages` suite (softmax, layer norm, RMS norm, row minimum,
max pooling): what a user would call instead of our kernels there. Times each workload of bench/workloads.json's
`stages` the way the bench times ours (a CUDA graph of N calls replayed between two events,
rounds of about --round-seconds, the median of --rounds rounds) and writes one JSON object:

    python3 bench/gpu/torch_stages.py --out torch-stages.json

bench/gpu/run.sh runs it after `--suite stages`, in the same device call. fp32 throughout;
layer norm with scale and bias and RMS norm with a scale, epsilon 1e-5, as the bench's kernels.
"""
import argparse
import json
import os
import statistics
import sys


def workloads(path):
    with open(path) as f:
        return json.load(f)["stages"]


def op_for(w, torch):
    """The PyTorch call and its inputs for one workload."""
    F = torch.nn.functional
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    rand = lambda *s: torch.rand(*s, device=dev, generator=g) * 2 - 1
    if w["op"] == "softmax":
        x = rand(w["rows"], w["cols"])
        return "torch.softmax(x, dim=-1)", lambda: torch.softmax(x, dim=-1)
    if w["op"] == "layer_norm":
        cols = w["cols"]
        x, gamma, beta = rand(w["rows"], cols), rand(cols), rand(cols)
        return "F.layer_norm(x, (cols,), gamma, beta, 1e-5)", lambda: F.layer_norm(
            x, (cols,), gamma, beta, 1e-5
        )
    if w["op"] == "rms_norm":
        cols = w["cols"]
        x, gamma = rand(w["rows"], cols), rand(cols)
        return "F.rms_norm(x, (cols,), gamma, 1e-5)", lambda: F.rms_norm(x, (cols,), gamma, 1e-5)
    if w["op"] == "row_min":
        x = rand(w["rows"], w["cols"])
        return "torch.amin(x, dim=-1)", lambda: torch.amin(x, dim=-1)
    if w["op"] == "max_pool":
        x = rand(w["N"], w["C"], w["H"], w["W"])
        k, s, p = w["K"], w["stride"], w.get("pad", 0)
        return f"F.max_pool2d(x, {k}, {s}, {p})", lambda: F.max_pool2d(x, k, s, p)
    raise ValueError(f"unknown op {w['op']}")


def time_graph(fn, torch, round_seconds, rounds):
    """Seconds per call: the median over rounds of a graph of N calls between two events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    # N: calls in about round_seconds, from a few eager calls.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        fn()
    end.record()
    end.synchronize()
    per_call = max(start.elapsed_time(end) / 1e3 / 10, 1e-7)
    n = int(min(max(round_seconds / per_call, 1), 2000))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / n)
    return statistics.median(samples), samples, n


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=os.path.join(here, "..", "workloads.json"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--round-seconds", type=float, default=0.02)
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        sys.exit(f"torch_stages.py: PyTorch is not importable ({e})")
    if not torch.cuda.is_available():
        sys.exit("torch_stages.py: no CUDA device")
    torch.backends.cudnn.benchmark = True
    results = []
    for w in workloads(args.workloads):
        call, fn = op_for(w, torch)
        median, samples, n = time_graph(fn, torch, args.round_seconds, args.rounds)
        results.append({"name": w["name"], "call": call, "seconds": median,
                        "rounds": samples, "calls_per_round": n})
        print(f"torch {w['name']}: {call}: {median * 1e6:.2f} us")
    with open(args.out, "w") as f:
        json.dump({
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "device": torch.cuda.get_device_name(),
            "timing": "a CUDA graph of N calls replayed between two events; median of the rounds",
            "results": results,
        }, f, indent=1)


if __name__ == "__main__":
    main()

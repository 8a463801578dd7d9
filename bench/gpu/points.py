#!/usr/bin/env python3
"""Merges the measured points of GPU landscape archives into one points file for
tests/tests/gpu_default_replay.rs: per workload (and dtypes), [config, median GFLOPS over the
archives that measured it, how many did]. Failed points are left out.

    python3 bench/gpu/points.py --half no --device 'NVIDIA H200' --about '...' OUT.json A.tar.gz ...

`--half yes` keeps only half-precision workloads (any tensor not f32), `--half no` only fp32.
"""
import argparse
import json
import statistics
import tarfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--half", choices=["yes", "no"], required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--about", required=True)
    ap.add_argument("out")
    ap.add_argument("archives", nargs="+")
    args = ap.parse_args()
    # (name, dtypes) -> {"kernel", "shapes", "runs": {config: [gflops per archive]}}
    work = {}
    for path in args.archives:
        seen = {}
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                if not member.name.endswith(".jsonl"):
                    continue
                for line in tar.extractfile(member).read().decode().splitlines():
                    r = json.loads(line)
                    if r.get("error") or not r.get("gflops"):
                        continue
                    dtypes = r["dtype"] if r["dtype"] != "f32" else ""
                    if (args.half == "yes") != bool(dtypes):
                        continue
                    key = (r["name"], dtypes)
                    w = work.setdefault(
                        key, {"kernel": r["kernel_text"], "shapes": r["shapes"], "runs": {}}
                    )
                    # Within one archive, a point measured twice counts once (its median).
                    seen.setdefault((key, r["config"]), []).append(r["gflops"])
        for (key, config), values in seen.items():
            work[key]["runs"].setdefault(config, []).append(statistics.median(values))
    workloads = []
    for (name, dtypes), w in sorted(work.items()):
        points = sorted(
            ([c, round(statistics.median(v), 1), len(v)] for c, v in w["runs"].items()),
            key=lambda p: -p[1],
        )
        entry = {"name": name, "kernel": w["kernel"], "shapes": w["shapes"]}
        if dtypes:
            entry["dtypes"] = dtypes
        entry["points"] = points
        workloads.append(entry)
    with open(args.out, "w") as f:
        json.dump({"about": args.about, "device": args.device, "workloads": workloads}, f, indent=1)
        f.write("\n")
    print(f"{args.out}: {len(workloads)} workloads, {sum(len(w['points']) for w in workloads)} points")


if __name__ == "__main__":
    main()

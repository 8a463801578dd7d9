#!/usr/bin/env python3
"""Apache TVM MetaSchedule baseline for the bench: tune one workload, report time and GFLOPS.

Issue 11 asks that our 64-trial tuning beat TVM MetaSchedule's 64-trial result in less time.
This script is the TVM side of that comparison (bench/tvm/compare.sh runs both; see
bench/README.md, "TVM MetaSchedule"). It runs TVM exactly as a user following TVM's own
tutorial would, with its defaults, and reports what it finds:

  tvm_metaschedule.py M N K [--trials 64] [--threads T] [--seed S] [--json OUT]
  tvm_metaschedule.py --op batch_matmul B M N K ...
  tvm_metaschedule.py --op conv2d N C H W F R S STRIDE PAD ...

1. The workload in TE, f32, row-major like the bench's kernels:
   - matmul        c[i, j] = sum_k a[i, k] * b[k, j]            (a M×K, b K×N, c M×N)
   - batch_matmul  c[b, i, j] = sum_k a[b, i, k] * b[b, k, j]   (a B×M×K, b B×K×N)
   - conv2d        NCHW input, FCRS weights, zero padding PAD, stride STRIDE
   made a PrimFunc with `te.create_prim_func`. No buffer is marked layout-free, so
   MetaSchedule cannot rewrite an input's layout outside the timed call: every operand is
   an activation, as for our kernels.
2. The LLVM target for this CPU: `mcpu` is what LLVM detects for the host
   (`tvm.target.codegen.llvm_get_system_cpu()`; the vector width and AVX-512 follow from
   it) and `num-cores` the thread count.
3. Tuning with `tvm.s_tir.meta_schedule.tune_tir` and its defaults: max_trials_global =
   `--trials`, 64 trials per iteration, the evolutionary search strategy, the XGBoost cost
   model (so `xgboost` must be installed, as TVM's default needs), the gradient task
   scheduler, the local builder (one process per core) and the local runner (one process,
   `EvaluatorConfig()` defaults). The **tuning seconds** are wall-clock from the call to
   `tune_tir` to the best schedule compiled to a loadable module (starting the builder
   and runner processes, the search, every build and measurement, the cost model,
   picking the best record, the final build). Loading TVM in this process (its tensor
   intrinsics take tens of seconds to parse) comes before and is `setup_seconds`.
4. The best schedule's output is checked against numpy (float64 reference; largest
   |tvm − ref| / max(|ref|, 1) ≤ 1e-3, the bench's tolerance) on seeded uniform [−1, 1)
   inputs, then it is timed with `time_evaluator` (`--repeat` repeats of at least
   `--min-repeat-ms` each; the median of the per-call means) on `--threads` threads
   (`TVM_NUM_THREADS`, set before TVM loads, so the tuning runner uses the same count).

Output: one JSON object (`--json OUT`, else stdout) with the workload, trials run, tuning
seconds, best GFLOPS, TVM version, target, threads and date; a one-line summary on stderr.
Exit status: 0 ok; 1 a usage error, or tuning found nothing valid or the output check
failed (then the JSON says which, with "status": "failed"); 2 TVM, psutil (MetaSchedule needs it) or xgboost (for the
default cost model) is not installed (the bench treats that as a skipped column).

Work files (TVM's logs and tuning database) go to a fresh folder under the system
temporary directory, removed at the end unless `--work-dir` names one (then it is kept).
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

OPS = {
    "matmul": ["M", "N", "K"],
    "batch_matmul": ["B", "M", "N", "K"],
    "conv2d": ["N", "C", "H", "W", "F", "R", "S", "stride", "pad"],
}


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 1: status 2 means "TVM is not usable here"."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def parse_args(argv):
    p = Parser(
        description="Tune one workload with TVM MetaSchedule; report tuning time and GFLOPS.",
        epilog="Workload sizes: matmul M N K; batch_matmul B M N K; "
        "conv2d N C H W F R S STRIDE PAD (NCHW input, FCRS weights).",
    )
    p.add_argument("dims", type=int, nargs="+", help="the workload's sizes (see below)")
    p.add_argument("--op", choices=sorted(OPS), default="matmul")
    p.add_argument("--trials", type=int, default=64, help="max_trials_global (default 64)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="TVM_NUM_THREADS and the target's num-cores "
        "(default: the cores this process may run on)",
    )
    p.add_argument("--seed", type=int, default=1, help="tuning seed and input seed (default 1)")
    p.add_argument("--work-dir", default=None, help="keep TVM's logs and database here")
    p.add_argument("--json", default=None, help="write the report here (default: stdout)")
    p.add_argument(
        "--cost-model",
        default="xgb",
        choices=["xgb", "random", "mlp"],
        help="MetaSchedule's cost model (default xgb, TVM's default)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="builder and runner timeout in seconds (default: TVM's 30; raise it only "
        "on a loaded machine, where builds of a batch can take longer)",
    )
    p.add_argument("--repeat", type=int, default=21, help="timed repeats of the best (21)")
    p.add_argument(
        "--min-repeat-ms", type=int, default=100, help="length of one timed repeat (100 ms)"
    )
    args = p.parse_args(argv)
    if len(args.dims) != len(OPS[args.op]):
        p.error(f"{args.op} takes {len(OPS[args.op])} sizes: {' '.join(OPS[args.op])}")
    if any(d <= 0 for d in args.dims) and args.op != "conv2d":
        p.error("sizes must be positive")
    if args.trials < 1:
        p.error("--trials must be at least 1")
    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0))
    if args.threads < 1:
        p.error("--threads must be at least 1")
    return args


def workload(te, op, dims):
    """The TE tensors (inputs..., output), the shapes as a dict, and the FLOPs."""
    f32 = "float32"
    if op == "matmul":
        m, n, k = dims
        a = te.placeholder((m, k), name="a", dtype=f32)
        b = te.placeholder((k, n), name="b", dtype=f32)
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
        return [a, b, c], {"M": m, "N": n, "K": k}, 2 * m * n * k
    if op == "batch_matmul":
        bs, m, n, k = dims
        a = te.placeholder((bs, m, k), name="a", dtype=f32)
        b = te.placeholder((bs, k, n), name="b", dtype=f32)
        r = te.reduce_axis((0, k), name="k")
        c = te.compute(
            (bs, m, n), lambda q, i, j: te.sum(a[q, i, r] * b[q, r, j], axis=r), name="c"
        )
        return [a, b, c], {"B": bs, "M": m, "N": n, "K": k}, 2 * bs * m * n * k
    n, ch, h, w, f, kr, ks, st, pad = dims
    if min(n, ch, h, w, f, kr, ks, st) <= 0 or pad < 0:
        raise ValueError("conv2d sizes must be positive (padding non-negative)")
    p_out = (h + 2 * pad - kr) // st + 1
    q_out = (w + 2 * pad - ks) // st + 1
    if p_out <= 0 or q_out <= 0:
        raise ValueError("the filter is larger than the padded input")
    x = te.placeholder((n, ch, h, w), name="x", dtype=f32)
    wt = te.placeholder((f, ch, kr, ks), name="w", dtype=f32)
    xp = te.compute(
        (n, ch, h + 2 * pad, w + 2 * pad),
        lambda a, c, y, z: te.if_then_else(
            te.all(y >= pad, y < h + pad, z >= pad, z < w + pad),
            x[a, c, y - pad, z - pad],
            te.const(0.0, f32),
        ),
        name="x_pad",
    )
    rc = te.reduce_axis((0, ch), name="rc")
    rr = te.reduce_axis((0, kr), name="rr")
    rs = te.reduce_axis((0, ks), name="rs")
    y = te.compute(
        (n, f, p_out, q_out),
        lambda a, o, i, j: te.sum(
            xp[a, rc, i * st + rr, j * st + rs] * wt[o, rc, rr, rs], axis=[rc, rr, rs]
        ),
        name="y",
    )
    shape = {"N": n, "C": ch, "H": h, "W": w, "F": f, "R": kr, "S": ks, "stride": st, "pad": pad}
    return [x, wt, y], shape, 2 * n * f * p_out * q_out * ch * kr * ks


def reference(np, op, arrays, dims):
    """The expected output in float64 (numpy)."""
    a, b = (v.astype(np.float64) for v in arrays)
    if op in ("matmul", "batch_matmul"):
        return a @ b
    n, ch, h, w, f, kr, ks, st, pad = dims
    xp = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    p_out = (h + 2 * pad - kr) // st + 1
    q_out = (w + 2 * pad - ks) // st + 1
    out = np.zeros((n, f, p_out, q_out))
    for r in range(kr):
        for s in range(ks):
            win = xp[:, :, r : r + st * (p_out - 1) + 1 : st, s : s + st * (q_out - 1) + 1 : st]
            out += np.einsum("ncpq,fc->nfpq", win, b[:, :, r, s])
    return out


def machine_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def fail_missing(args, what, hint):
    """Exit 2 (a skipped column) saying why; with --json, the report says it too."""
    reason = f"{what} ({hint})"
    sys.stderr.write(f"tvm_metaschedule: skipped: {reason}\n")
    if args.json:
        with open(args.json, "w") as f:
            report = {"tool": "TVM MetaSchedule", "status": "skipped", "error": reason}
            f.write(json.dumps(report, indent=2) + "\n")
    sys.exit(2)


def serialization_works():
    """Whether TVM can write its IR as JSON, tried in a child process.

    MetaSchedule's database stores every workload and trace as JSON. apache-tvm 0.27.0.post1
    with apache-tvm-ffi 0.1.15 (which its `>=0.1.14.post0` requirement lets pip pick)
    segfaults there, which would kill this script mid-tuning without a report.
    """
    import subprocess

    probe = "import tvm; tvm.ir.save_json(tvm.tirx.IntImm('int32', 1))"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def main(argv):
    args = parse_args(argv)
    # Before TVM loads: its thread pool reads this once, and the tuning runner's worker
    # process inherits it, so candidates are measured on as many threads as the best.
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    t_setup = time.perf_counter()
    try:
        import numpy as np
    except ImportError as e:
        fail_missing(args, f"numpy is not installed: {e}", "pip install numpy")
    try:
        import tvm
        from tvm import te
        from tvm.s_tir import meta_schedule as ms
        from tvm.target import codegen
    except ImportError as e:
        fail_missing(args, f"TVM is not installed: {e}", "pip install apache-tvm")
    if not serialization_works():
        import tvm_ffi

        fail_missing(
            args,
            f"TVM {tvm.__version__} crashes writing IR as JSON with apache-tvm-ffi "
            f"{tvm_ffi.__version__}",
            "pip install apache-tvm-ffi==0.1.14.post1",
        )
    # MetaSchedule's own requirements (apache-tvm's "popen-pool" and "meta-schedule"
    # extras), imported lazily deep inside tuning: checked here so a missing one is a
    # skip with a clear message, not a failure minutes into a run.
    needed = [("psutil", "psutil"), ("cloudpickle", "cloudpickle")]
    if args.cost_model == "xgb":
        needed.append(("xgboost", "xgboost (TVM's default cost model; or --cost-model random)"))
    for module, what in needed:
        try:
            __import__(module)
        except ImportError as e:
            fail_missing(args, f"{what} is not installed: {e}", f"pip install {module}")
    # Importing TVM's tensor intrinsics parses hundreds of TVMScript functions (tens of
    # seconds); tune_tir does it on its first call. Done here, it is timed apart.
    import tvm.s_tir.tensor_intrin  # noqa: F401

    setup_seconds = time.perf_counter() - t_setup

    try:
        tensors, shape, flops = workload(te, args.op, args.dims)
    except ValueError as e:
        sys.stderr.write(f"tvm_metaschedule: {e}\n")
        sys.exit(1)
    func = te.create_prim_func(tensors)
    mcpu = codegen.llvm_get_system_cpu()
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": args.threads})
    vector_bits = int(codegen.llvm_get_vector_width(target))
    avx512 = bool(codegen.llvm_cpu_has_features(["avx512f"], target))

    keep = args.work_dir is not None
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="tvm-metaschedule-")
    os.makedirs(work_dir, exist_ok=True)
    report = {
        "tool": "TVM MetaSchedule",
        "status": "ok",
        "op": args.op,
        "shape": shape,
        "flops": flops,
        "trials_requested": args.trials,
        "threads": args.threads,
        "seed": args.seed,
        "tvm_version": tvm.__version__,
        "target": str(target),
        "mcpu": mcpu,
        "vector_bits": vector_bits,
        "avx512": avx512,
        "tuning": {
            "function": "tvm.s_tir.meta_schedule.tune_tir",
            "strategy": "evolutionary",
            "cost_model": args.cost_model,
            "num_trials_per_iter": 64,
            "builder": "local",
            "runner": "local",
            "timeout_sec": args.timeout or 30,
        },
        "machine": {"cpu": machine_cpu(), "cores_available": len(os.sched_getaffinity(0))},
        "command": " ".join([sys.executable, *sys.argv]),
        "setup_seconds": setup_seconds,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "work_dir": work_dir if keep else None,
    }

    # TVM prints its progress (task tables, log folder) on stdout: send it to stderr so
    # that stdout carries only the report.
    saved_stdout = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        builder, runner = "local", "local"
        if args.timeout:
            # tune_tir's own builder and runner with a longer timeout (TVM's is 30 s per
            # batch of builds, too short on a loaded machine).
            builder = ms.builder.LocalBuilder(
                max_workers=ms.utils.cpu_count(logical=False), timeout_sec=args.timeout
            )
            runner = ms.runner.LocalRunner(timeout_sec=args.timeout)
        t0 = time.perf_counter()
        database = ms.tune_tir(
            mod=func,
            target=target,
            work_dir=work_dir,
            max_trials_global=args.trials,
            builder=builder,
            runner=runner,
            cost_model=args.cost_model,
            seed=args.seed,
        )
        t1 = time.perf_counter()
        sch = ms.tir_integration.compile_tir(database, func, target)
        lib = None
        if sch is not None:
            lib = tvm.tirx.build(sch.mod, target=target)
        t2 = time.perf_counter()

        records = database.get_all_tuning_records()
        valid = []
        for rec in records:
            secs = [float(x) for x in (rec.run_secs or [])]
            if secs and max(secs) < 1e9:  # MetaSchedule marks a failed run 1e10 s
                valid.append(sum(secs) / len(secs))
        report.update(
            {
                "trials": len(records),
                "valid_trials": len(valid),
                "tune_seconds": t2 - t0,
                "search_seconds": t1 - t0,
                "final_build_seconds": t2 - t1,
                "tuned_gflops": flops / min(valid) / 1e9 if valid else None,
            }
        )
        if lib is None:
            raise RuntimeError("tuning found no valid schedule")

        dev = tvm.cpu(0)
        rng = np.random.default_rng(args.seed)
        inputs = [
            rng.uniform(-1.0, 1.0, size=[int(d) for d in t.shape]).astype(np.float32)
            for t in tensors[:2]
        ]
        out_shape = [int(d) for d in tensors[-1].shape]
        args_tvm = [tvm.runtime.tensor(v, dev) for v in inputs]
        args_tvm.append(tvm.runtime.tensor(np.full(out_shape, np.nan, np.float32), dev))
        lib[lib.entry_name](*args_tvm)
        got = args_tvm[-1].numpy().astype(np.float64)
        want = reference(np, args.op, inputs, args.dims)
        err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))
        report["max_rel_err"] = err if np.isfinite(err) else None
        if not np.isfinite(err) or err > 1e-3:
            raise RuntimeError(f"output differs from numpy: max relative error {err:.3e}")

        timer = lib.time_evaluator(
            lib.entry_name, dev, number=1, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms
        )
        per_call = sorted(float(x) for x in timer(*args_tvm).results)
        median = per_call[len(per_call) // 2]
        if len(per_call) % 2 == 0:
            median = 0.5 * (per_call[len(per_call) // 2 - 1] + median)
        report.update(
            {
                "best_seconds": median,
                "best_gflops": flops / median / 1e9,
                "timing": {
                    "repeats": args.repeat,
                    "min_repeat_ms": args.min_repeat_ms,
                    "per_call_seconds": per_call,
                },
            }
        )
        status = 0
    except Exception as e:  # a failure is a report too (the traceback goes to stderr)
        report["status"] = "failed"
        report["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc(file=sys.stderr)
        status = 1
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)

    text = json.dumps(report, indent=2) + "\n"
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    dims = "x".join(str(d) for d in args.dims)
    if status == 0:
        sys.stderr.write(
            f"tvm_metaschedule: {args.op} {dims}: {report['trials']} trials "
            f"({report['valid_trials']} valid) in {report['tune_seconds']:.1f} s, "
            f"best {report['best_gflops']:.1f} GFLOPS on {args.threads} threads "
            f"(TVM {tvm.__version__}, mcpu={mcpu})\n"
        )
    else:
        sys.stderr.write(f"tvm_metaschedule: {args.op} {dims}: failed: {report['error']}\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

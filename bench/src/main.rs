//! `bench`: tunes the seed workloads (`bench/workloads.json`) with a chosen strategy and
//! trial budget, then times our best configuration against the baselines (OpenBLAS, oneDNN
//! and `matrixmultiply` on the CPU, cuBLAS/cuDNN on the GPU) side by side in the same
//! process (alternating rounds, medians), with each kernel's share of the machine's
//! measured peak. See `bench/README.md`.
//!
//! ```text
//! cargo run --release -p bench -- --suite bert_matmul --device cpu --trials 32 \
//!     --strategy random --seed 1 --json results.json --plot results.svg
//! ```

mod baseline;
mod baselines;
mod cuda;
mod landscape;
mod load;
mod onednn;
mod openblas;
mod ort;
mod peak;
mod report;
mod run;
mod stages;
mod timing;
mod tuning;
mod workloads;

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

use report::{KernelResult, Machine, Report};
use workloads::{Workload, SMOKE_SUITE};

#[derive(Parser, Debug)]
#[command(
    name = "bench",
    version,
    about = "Tune the seed workloads and time them against BLAS and oneDNN baselines, side by side"
)]
struct Args {
    /// Suite(s) to run, comma-separated: bert_matmul, opevo_matmul, opevo_batch_matmul,
    /// opevo_conv2d, resnet50_conv2d, yolo9000_conv2d, or `all`.
    #[arg(long)]
    suite: String,
    /// `cpu` (baselines: matrixmultiply, OpenBLAS and oneDNN where installed) or `cuda`
    /// (baseline: cuBLAS, cuDNN; needs a GPU, NVRTC, and cuBLAS/cuDNN on the library path).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    device: String,
    /// Measured points per kernel.
    #[arg(long, default_value_t = 32)]
    trials: usize,
    /// Search strategy (see `tuner::strategy::by_name`); `default`: the device's own
    /// (`tensor_dsl::autotune::default_strategy`: droplet on the CPU, combined on CUDA).
    #[arg(long, default_value = tensor_dsl::autotune::DEFAULT_STRATEGY_NAME)]
    strategy: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the report (JSON) here, updated after every kernel.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Points built in parallel per measurement batch.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Stop tuning a kernel after this many seconds (besides the trial budget).
    #[arg(long)]
    tune_seconds: Option<f64>,
    /// Write every measured point of every kernel to `DIR/<suite>_<name>.jsonl` (records
    /// format), for offline strategy replays.
    #[arg(long, value_name = "DIR")]
    record_landscape: Option<PathBuf>,
    /// Draw best-so-far GFLOPS against trials, one line per kernel, into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Element types: a bare type (`bf16`, `f16`) for the two operands of every
    /// contraction, the output and any bias staying `f32`; or `name=type` pairs for the
    /// kernel's tensors (`a=bf16,b=bf16,c=f32`). On a GPU half operands take the
    /// tensor-core template and, as baselines, cuBLAS `GemmEx` / cuDNN in half precision;
    /// on the CPU (matmul and convolution suites, f32 outputs) the library columns are
    /// oneDNN's matmul or convolution in that precision, and the peak measured is the
    /// `bf16` dot product's (`vdpbf16ps`) for `bf16` operands where the CPU has it.
    #[arg(long, default_value = "")]
    dtypes: String,
    /// Only these workloads (names, comma-separated, e.g. M0,M3).
    #[arg(long, value_delimiter = ',')]
    filter: Vec<String>,
    /// Skip kernels above this many GFLOP (reported as `skipped`).
    #[arg(long, value_name = "X")]
    max_gflop: Option<f64>,
    /// Timed rounds per contender (ours, baseline, default, alternating).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Target length of one timed round in seconds (a round repeats the call).
    #[arg(long, default_value_t = 0.05)]
    round_seconds: f64,
    /// During tuning, kill candidates slower than this many GFLOPS (recorded as timed out).
    #[arg(long, default_value_t = 1.0)]
    min_candidate_gflops: f64,
    /// During tuning, kill candidates this many times slower than the best so far
    /// (recorded as timed out); 0 never kills for being relatively slow.
    #[arg(long, default_value_t = 5.0)]
    kill_factor: f64,
    /// Leave the heuristic default out of the search (by default it is the first trial).
    #[arg(long)]
    pure_search: bool,
    /// Before timing each kernel, wait up to this many seconds for the machine to be at
    /// most 25% busy.
    #[arg(long, default_value_t = 0.0)]
    wait_quiet: f64,
    /// Read workloads from this file instead of the built-in copy of bench/workloads.json.
    #[arg(long)]
    workloads: Option<PathBuf>,
    /// OpenMP idle threads: `passive` (sleep at once; sets OMP_WAIT_POLICY=PASSIVE for this
    /// process and its measurement children), `active` (spin), or `inherit` (leave the
    /// environment alone). Spinning threads hold their cores, so on a machine shared with
    /// other work a parallel kernel waits a whole time slice for a preempted thread.
    #[arg(long, default_value = "passive", value_parser = ["passive", "active", "inherit"])]
    omp_wait_policy: String,
    /// Leave out the library baselines (OpenBLAS, oneDNN; `matrixmultiply` always runs).
    #[arg(long)]
    no_libraries: bool,
    /// Do not measure the machine's peak FMA throughput (no `% peak` column).
    #[arg(long)]
    no_peak: bool,
    /// Print one line per trial.
    #[arg(long, short)]
    verbose: bool,
    /// Print the selected workloads as kernels of the language (JSON: suite, name, kernel,
    /// flops, tensors with name, shape and whether it is the output) and exit.
    #[arg(long)]
    list_kernels: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workloads `--suite` and `--filter` select.
fn select(args: &Args) -> Result<Vec<Workload>, String> {
    let text = match &args.workloads {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => workloads::WORKLOADS_JSON.to_string(),
    };
    let suites = workloads::load(&text)?;
    let mut chosen = Vec::new();
    for want in args
        .suite
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let matched: Vec<&(String, Vec<Workload>)> = suites
            .iter()
            .filter(|(name, _)| name == want || (want == "all" && name != SMOKE_SUITE))
            .collect();
        if matched.is_empty() {
            let known: Vec<&str> = suites
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| *n != SMOKE_SUITE)
                .collect();
            return Err(format!(
                "unknown suite `{want}`: expected one of {} or all",
                known.join(", ")
            ));
        }
        for (_, list) in matched {
            chosen.extend(list.iter().cloned());
        }
    }
    if !args.filter.is_empty() {
        for f in &args.filter {
            if !chosen.iter().any(|w| &w.name == f) {
                return Err(format!(
                    "--filter: no workload named `{f}` in the chosen suites"
                ));
            }
        }
        chosen.retain(|w| args.filter.contains(&w.name));
    }
    if chosen.is_empty() {
        return Err("no workload selected".into());
    }
    Ok(chosen)
}

/// `--list-kernels`.
fn list_kernels(chosen: &[Workload]) -> Result<ExitCode, String> {
    let mut list = Vec::new();
    for w in chosen {
        let p = w.problem()?;
        let tensors: Vec<serde_json::Value> = p
            .kernel
            .params
            .iter()
            .zip(&p.shapes)
            .map(|(param, shape)| {
                serde_json::json!({"name": param.name, "shape": shape, "output": param.is_output})
            })
            .collect();
        list.push(serde_json::json!({
            "suite": w.suite, "name": w.name, "kernel": p.kernel.to_string(),
            "flops": p.flops(), "tensors": tensors,
        }));
    }
    let text = serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

fn run(args: &Args) -> Result<ExitCode, String> {
    if args.list_kernels {
        return list_kernels(&select(args)?);
    }
    let gpu = args.device == "cuda";
    if args.trials == 0 {
        return Err("--trials must be at least 1".into());
    }
    let device = if gpu {
        tensor_dsl::Device::Cuda
    } else {
        tensor_dsl::Device::Cpu
    };
    let strategy = tensor_dsl::autotune::resolve_strategy(&args.strategy, device).to_string();
    if !tuning::is_strategy(&strategy) {
        return Err(format!(
            "unknown strategy `{}`: expected one of {} or default",
            args.strategy,
            tuning::strategy_names().join(", ")
        ));
    }
    let chosen = select(args)?;
    let dtype = workloads::operand_dtype(&args.dtypes)?;
    if !gpu && dtype != tensor_dsl::ir::DType::F32 {
        // On the CPU: matmuls and convolutions with half-precision operands and an f32
        // output, against the libraries' matmuls and convolutions in that precision.
        for w in &chosen {
            let typed = matches!(
                w.op,
                workloads::Op::Matmul { .. }
                    | workloads::Op::BatchMatmul { .. }
                    | workloads::Op::Conv2d(_)
            );
            let p = w.problem_with(&args.dtypes)?;
            if !typed || p.kernel.params[p.kernel.output].dtype != tensor_dsl::ir::DType::F32 {
                return Err(format!(
                    "--dtypes on the CPU is for matmuls, batched matmuls and convolutions \
                     with an f32 output ({} is not one)",
                    w.name
                ));
            }
        }
    }
    match args.omp_wait_policy.as_str() {
        // Set before anything loads libgomp (it reads the variable once, at load).
        "passive" => std::env::set_var("OMP_WAIT_POLICY", "PASSIVE"),
        "active" => std::env::set_var("OMP_WAIT_POLICY", "ACTIVE"),
        _ => {}
    }
    let gpu_name = if gpu {
        // fp32 against fp32: no TF32 in cuBLAS/cuDNN whatever their defaults (read when
        // they load, which is later).
        std::env::set_var("NVIDIA_TF32_OVERRIDE", "0");
        match cuda::describe_gpu() {
            Ok(name) => Some(name),
            Err(reason) => {
                eprintln!("bench: --device cuda needs a GPU: {reason}");
                return Ok(ExitCode::from(2));
            }
        }
    } else {
        tensor_dsl::runtime::cpu::compiler()
            .map_err(|e| format!("the CPU bench needs a C compiler: {e}"))?;
        None
    };
    let baseline_name = |op: &workloads::Op| {
        if gpu {
            cuda::baseline_name(op, dtype)
        } else {
            baseline::name(op).to_string()
        }
    };
    let settings = tuning::Settings {
        strategy,
        trials: args.trials,
        batch: args.batch,
        seconds: args.tune_seconds,
        seed: args.seed,
        start_from_default: !args.pure_search,
        kill_factor: args.kill_factor,
        floor_gflops: args.min_candidate_gflops,
    };
    let opts = run::Options {
        settings: &settings,
        plan: timing::Plan {
            rounds: args.rounds,
            round_seconds: args.round_seconds,
        },
        wait_quiet: std::time::Duration::from_secs_f64(args.wait_quiet.clamp(0.0, 3600.0)),
        landscape: args.record_landscape.as_deref(),
        verbose: args.verbose,
        libraries: !args.no_libraries,
    };
    let mut machine = Machine::this();
    machine.gpu = gpu_name;
    if !gpu && !args.no_peak {
        let dot = dtype == tensor_dsl::ir::DType::BF16;
        match peak::measure(0.2, 5, dot) {
            Ok(p) => {
                eprintln!(
                    "bench: measured peak {:.1} GFLOPS ({}: {} f32 lanes, {} accumulators, {} threads)",
                    p.gflops, p.instruction, p.lanes, p.accumulators, p.threads
                );
                machine.peak = Some(p);
            }
            Err(e) => eprintln!("bench: peak not measured: {e}"),
        }
    }
    let peak_gflops = machine.peak.as_ref().map(|p| p.gflops);
    let mut report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        results: Vec::new(),
    };
    for w in &chosen {
        let mut result = match w.problem_with(&args.dtypes) {
            Err(e) => {
                let mut r =
                    KernelResult::empty(&w.suite, &w.name, w.shape.clone(), &baseline_name(&w.op));
                r.device = args.device.clone();
                r.fail(e);
                r
            }
            Ok(p) => match args.max_gflop {
                Some(max) if p.flops() > max * 1e9 => {
                    let mut r = KernelResult::empty(
                        &w.suite,
                        &w.name,
                        w.shape.clone(),
                        &baseline_name(&w.op),
                    );
                    r.device = args.device.clone();
                    r.flops = p.flops();
                    r.kernel = p.kernel.to_string();
                    r.tensor_shapes = p.shapes.clone();
                    r.strategy = settings.strategy.clone();
                    r.status = "skipped".into();
                    r.error = Some(format!(
                        "{:.1} GFLOP is above --max-gflop {max}",
                        p.flops() / 1e9
                    ));
                    r
                }
                _ => {
                    eprintln!(
                        "bench: {}/{}: {:.2} GFLOP, tuning {} trials ({})",
                        w.suite,
                        w.name,
                        p.flops() / 1e9,
                        settings.trials,
                        settings.strategy
                    );
                    if gpu {
                        cuda::run(w, &p, &opts)
                    } else {
                        run::run(w, &p, &opts)
                    }
                }
            },
        };
        result.summarise(peak_gflops);
        let g = |v: Option<f64>, d: usize| v.map_or("-".into(), |g| format!("{g:.d$}"));
        eprintln!(
            "bench: {}/{}: {} — ours {} GFLOPS{}, baseline {} GFLOPS, ratio {}, best baseline {} GFLOPS ({}), ours/best {}{}",
            result.suite,
            result.name,
            result.status,
            g(result.ours_gflops, 1),
            result
                .ours_share_of_peak
                .map_or(String::new(), |x| format!(" ({:.0}% of peak)", 100.0 * x)),
            g(result.baseline_gflops, 1),
            g(result.ratio, 2),
            g(result.best_baseline_gflops, 1),
            result.best_baseline.as_deref().unwrap_or("-"),
            g(result.ratio_best, 2),
            result
                .error
                .as_ref()
                .map_or(String::new(), |e| format!(" ({e})"))
        );
        report.results.push(result);
        if let Some(path) = &args.json {
            report::write(path, &report)?;
        }
    }
    if let Some(path) = &args.plot {
        let series: Vec<tuner::plot::Series> = report
            .results
            .iter()
            .filter(|r| !r.history.is_empty())
            .map(|r| tuner::plot::Series {
                name: r.name.clone(),
                history: r.history.clone(),
            })
            .collect();
        let on = report.machine.gpu.as_deref().unwrap_or(&report.machine.cpu);
        let title = format!(
            "{} on {} — {} ({} trials, seed {})",
            args.suite, on, settings.strategy, settings.trials, settings.seed
        );
        tuner::plot::draw(path, &title, &series)?;
    }
    print!("{}", report::table(&report.results));
    let failed = report.results.iter().any(|r| r.status == "failed");
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

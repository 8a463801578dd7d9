//! `tensor-dsl`: the command-line tool. Kernels are given as text in the same syntax as the
//! `#[tensor_kernel]` body (parsed by the same code), with the tensors' shapes as at a call.
//!
//! ```text
//! tensor-dsl emit   --kernel 'c[[i,j]] += a[[i,k]] * b[[k,j]]' --shapes a=512x1024,b=1024x64,c=512x64 \
//!                   --target cuda:sm_90 --configs random:50 --seed 1 --out gen/
//! tensor-dsl inspect --kernel '...' --shapes ... --target cuda:sm_90a --config default
//! tensor-dsl verify --kernel '...' --shapes ... --device cpu --configs random:30 --seed 1
//! ```

mod args;
mod emit;
mod inspect;
mod landscape;
mod output;
mod records_cmd;
mod rows;
mod study;
mod tune;
mod verify;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tensor-dsl",
    version,
    about = "Generate, check and tune tensor-dsl kernels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The kernel and its shapes, shared by every command.
#[derive(clap::Args, Clone)]
pub struct KernelArgs {
    /// Kernel statements, separated by `;`, e.g. `'c[[i,j]] += a[[i,k]] * b[[k,j]]'`.
    #[arg(long)]
    pub kernel: String,
    /// Shapes of every tensor, in parameter order, e.g. a=512x1024,b=1024x64,c=512x64
    /// (a rank-0 tensor is `s=`).
    #[arg(long)]
    pub shapes: String,
    /// Kernel name used in generated files.
    #[arg(long, default_value = "kernel")]
    pub name: String,
    /// Element types of the tensors, e.g. a=bf16,b=bf16,c=f32 (f32, f16 or bf16; tensors
    /// not named are f32). Arithmetic is in f32 whatever the types.
    #[arg(long, default_value = "")]
    pub dtypes: String,
}

#[derive(Subcommand)]
enum Command {
    /// Write the generated source and config JSON of each selected configuration.
    Emit {
        #[command(flatten)]
        kernel: KernelArgs,
        /// `cpu`, `cuda:sm_XY`, or `cuda:sm_90a` (Hopper's `wgmma` for large half-precision
        /// GEMMs; compile its code for `compute_90a`/`sm_90a`).
        #[arg(long, default_value = "cpu")]
        target: String,
        /// `default`, `random:N` (N distinct valid configurations), or `config:TEXT`, one
        /// configuration's text as records, `inspect` and this command write it (kernels of
        /// one statement).
        #[arg(long, default_value = "default")]
        configs: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output directory (created if missing).
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Build and run configurations, compare each with the reference interpreter, print a
    /// JSON summary; exits non-zero on any mismatch.
    Verify {
        #[command(flatten)]
        kernel: KernelArgs,
        /// `cpu` or `cuda`.
        #[arg(long, default_value = "cpu")]
        device: String,
        /// `default` or `random:N`.
        #[arg(long, default_value = "random:10")]
        configs: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Print a static profile of one GPU configuration's machine code (NVRTC, ptxas,
    /// nvdisasm; no GPU needed): registers, spills, shared memory, occupancy and the hot
    /// loop's instruction mix.
    Inspect {
        #[command(flatten)]
        kernel: KernelArgs,
        /// `cuda:sm_XY` or `cuda:sm_90a`.
        #[arg(long, default_value = "cuda:sm_90")]
        target: String,
        /// `default`, or a config's text (as `emit` and records write it).
        #[arg(long, default_value = "default")]
        config: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Tune one kernel at one shape; every measurement is appended to the records file.
    Tune {
        #[command(flatten)]
        kernel: KernelArgs,
        /// `cpu`, or `cuda` (the GPU the CUDA runtime uses; records are keyed by its name and
        /// compute capability).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Search strategy: random, evolutionary, opevo, dgd, droplet, combined, opevo-droplet;
        /// `default`: the device's own (droplet on the CPU, combined on CUDA).
        #[arg(long, default_value = tensor_dsl::autotune::DEFAULT_STRATEGY_NAME)]
        strategy: String,
        /// Measurements (invalid ones count); 0 takes the cost model's pick (learned from
        /// the records at hand) without measuring.
        #[arg(long, default_value_t = 64)]
        trials: usize,
        /// Wall-clock limit in seconds, everything included; with it, tuning may also stop
        /// early when Droplet's test and the cost model agree nothing better is near.
        #[arg(long)]
        seconds: Option<f64>,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Records file to append to (default: the user cache).
        #[arg(long)]
        records: Option<std::path::PathBuf>,
        /// Print one JSON object (best_gflops, best_config, trials, valid_trials,
        /// tune_seconds, history) instead of a sentence.
        #[arg(long)]
        json: bool,
        /// Also draw best-so-far GFLOPS against trials into this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        svg: Option<std::path::PathBuf>,
        /// Inputs that stay unchanged between calls (comma-separated names, e.g. a layer's
        /// weights `w`): CPU candidates that pack one ahead of calls are timed on it packed
        /// once, as a caller passing it as an unchanged `Tensor` runs them.
        #[arg(long, value_name = "NAMES", default_value = "")]
        constant: String,
    },
    /// Measure every point of the kernel's CPU space (or a uniform sample of `--max` valid
    /// points of a larger one) and append them to a records file (for offline strategy
    /// comparisons with `replay` and `study`).
    Landscape {
        #[command(flatten)]
        kernel: KernelArgs,
        #[arg(long)]
        out: std::path::PathBuf,
        /// Spaces with more points than this are sampled: this many distinct valid points,
        /// drawn uniformly (seeded, so a rerun continues the same sample).
        #[arg(long, default_value_t = 5000)]
        max: usize,
        #[arg(long, default_value_t = 16)]
        batch: usize,
        /// Then measure the N fastest points twice more (pooled samples make the
        /// landscape's best robust to one lucky measurement).
        #[arg(long, default_value_t = 16)]
        refine: usize,
        /// After the sample, measure every valid neighbour (one knob step) of the N fastest
        /// points, so a sampled landscape is dense where searches end up.
        #[arg(long, default_value_t = 0)]
        neighbours: usize,
    },
    /// Inspect records and prepare them for shipping.
    Records {
        #[command(subcommand)]
        action: RecordsAction,
    },
    /// Rerun strategies offline on a recorded landscape: trials each needs to reach 95% of
    /// the landscape's best, over several seeds (JSON).
    Replay {
        #[command(flatten)]
        kernel: KernelArgs,
        #[arg(long)]
        landscape: std::path::PathBuf,
        /// Comma-separated names, or `all`.
        #[arg(long, default_value = "all")]
        strategies: String,
        #[arg(long, default_value_t = 64)]
        trials: usize,
        #[arg(long, default_value_t = 5)]
        seeds: u64,
        /// Target share of the best throughput.
        #[arg(long, default_value_t = 0.95)]
        share: f64,
    },
    /// The tuner's acceptance check, offline: replay every strategy over several seeds on
    /// recorded CPU landscapes (records files from `landscape` or `bench
    /// --record-landscape`) at each trial budget: final ratio to each landscape's best (min
    /// and median over seeds), spread across seeds, trials to 95%, the zero-trial pick
    /// leave-one-shape-out, pass/fail; writes study.json, study.md and SVGs into --out.
    Study {
        /// Landscape files (records, JSON Lines; several problems per file are fine).
        #[arg(required = true)]
        landscapes: Vec<std::path::PathBuf>,
        /// Comma-separated names, or `all`.
        #[arg(long, default_value = "all")]
        strategies: String,
        /// Trial budgets, comma-separated (each replayed separately: strategies plan for
        /// their budget).
        #[arg(long, value_delimiter = ',', default_value = "32,64")]
        budgets: Vec<usize>,
        /// How a point the landscape did not record replays: as its nearest recorded
        /// point, or as invalid.
        #[arg(long, value_enum, default_value = "nearest")]
        unrecorded: study::Unrecorded,
        /// Runs learn first from the other landscapes of their kernel (leave-one-shape-out),
        /// as tuning with records of other shapes at hand does; without it they start cold.
        #[arg(long)]
        transfer: bool,
        #[arg(long, default_value_t = 10)]
        seeds: u64,
        /// Target share of the best throughput.
        #[arg(long, default_value_t = 0.95)]
        share: f64,
        /// Folder for study.json, study.md and the SVGs.
        #[arg(long, default_value = "study")]
        out: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum RecordsAction {
    /// Summarise records, one line per key with its best (default file: the user cache);
    /// `--all` prints every measurement.
    Show {
        files: Vec<std::path::PathBuf>,
        /// Only this kernel: its name, or its fingerprint (or a prefix of it).
        #[arg(long)]
        kernel: Option<String>,
        #[arg(long)]
        json: bool,
        /// Every measurement, one per line, instead of one summary line per key.
        #[arg(long)]
        all: bool,
    },
    /// The fastest valid record per (kernel, shapes, target, codegen version).
    Best {
        files: Vec<std::path::PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Merge record files into one.
    Merge {
        files: Vec<std::path::PathBuf>,
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// The best records of one target (`cpu`, `cuda`, or part of a device name), to ship
    /// with an application and embed with `include_tuned!("...")`.
    Export {
        files: Vec<std::path::PathBuf>,
        #[arg(long)]
        target: Option<String>,
        #[arg(long)]
        out: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Emit {
            kernel,
            target,
            configs,
            seed,
            out,
        } => emit::run(&kernel, &target, &configs, seed, &out),
        Command::Verify {
            kernel,
            device,
            configs,
            seed,
        } => verify::run(&kernel, &device, &configs, seed),
        Command::Inspect {
            kernel,
            target,
            config,
            json,
        } => inspect::run(&kernel, &target, &config, json),
        Command::Tune {
            kernel,
            device,
            strategy,
            trials,
            seconds,
            seed,
            records,
            json,
            svg,
            constant,
        } => tune::run(
            &kernel, &device, &strategy, trials, seconds, seed, records, json, svg, &constant,
        ),
        Command::Records { action } => match action {
            RecordsAction::Show {
                files,
                kernel,
                json,
                all,
            } => records_cmd::show(&files, kernel.as_deref(), json, all),
            RecordsAction::Best { files, json } => records_cmd::best(&files, json),
            RecordsAction::Merge { files, out } => records_cmd::merge(&files, &out),
            RecordsAction::Export { files, target, out } => {
                records_cmd::export(&files, target.as_deref(), &out)
            }
        },
        Command::Landscape {
            kernel,
            out,
            max,
            batch,
            refine,
            neighbours,
        } => landscape::record(&kernel, &out, max, batch, refine, neighbours),
        Command::Replay {
            kernel,
            landscape,
            strategies,
            trials,
            seeds,
            share,
        } => landscape::replay(&kernel, &landscape, &strategies, trials, seeds, share),
        Command::Study {
            landscapes,
            strategies,
            budgets,
            unrecorded,
            transfer,
            seeds,
            share,
            out,
        } => study::run(
            &landscapes,
            &study::Settings {
                strategies,
                budgets,
                seeds,
                share,
                unrecorded,
                transfer,
            },
            &out,
        ),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            output::note(format_args!("tensor-dsl: error: {e}\n"));
            ExitCode::from(2)
        }
    }
}

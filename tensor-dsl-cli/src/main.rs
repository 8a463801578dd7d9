//! `tensor-dsl`: the command-line tool. Kernels are given as text in the same syntax as the
//! `#[tensor_kernel]` body (parsed by the same code), with the tensors' shapes as at a call.
//!
//! ```text
//! tensor-dsl emit   --kernel 'c[[i,j]] += a[[i,k]] * b[[k,j]]' --shapes a=512x1024,b=1024x64,c=512x64 \
//!                   --target cuda:sm_90 --configs random:50 --seed 1 --out gen/
//! tensor-dsl verify --kernel '...' --shapes ... --device cpu --configs random:30 --seed 1
//! ```

mod args;
mod emit;
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
    /// Kernel statements, separated by `;`, e.g. 'c[[i,j]] += a[[i,k]] * b[[k,j]]'.
    #[arg(long)]
    pub kernel: String,
    /// Shapes of every tensor, in parameter order, e.g. a=512x1024,b=1024x64,c=512x64
    /// (a rank-0 tensor is `s=`).
    #[arg(long)]
    pub shapes: String,
    /// Kernel name used in generated files.
    #[arg(long, default_value = "kernel")]
    pub name: String,
}

#[derive(Subcommand)]
enum Command {
    /// Write the generated source and config JSON of each selected configuration.
    Emit {
        #[command(flatten)]
        kernel: KernelArgs,
        /// `cpu` or `cuda:sm_XY`.
        #[arg(long, default_value = "cpu")]
        target: String,
        /// `default` or `random:N` (N distinct valid configurations).
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
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tensor-dsl: error: {e}");
            ExitCode::from(2)
        }
    }
}

//! `tensor-dsl tune`: tune one kernel at one shape, append every measurement to the records.

use crate::args::problem;
use crate::KernelArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use tensor_dsl::autotune::{tune_cpu, TuneOptions};
use tensor_dsl::records;

#[allow(clippy::too_many_arguments)]
pub fn run(
    args: &KernelArgs,
    device: &str,
    strategy: &str,
    trials: usize,
    seconds: Option<f64>,
    seed: u64,
    records_file: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode, String> {
    let p = problem(&args.name, &args.kernel, &args.shapes)?;
    if device != "cpu" {
        return Err(format!("--device `{device}`: tuning runs on `cpu` in this build (CUDA tuning needs a GPU measurer)"));
    }
    let opts = TuneOptions {
        strategy: strategy.to_string(),
        trials,
        seconds,
        seed,
        ..TuneOptions::default()
    };
    let quiet = json;
    let out = tune_cpu(&p.kernel, &p.shapes, &opts, &mut |n| {
        if !quiet {
            eprint!("\rtensor-dsl: tuning {}: trial {n}/{trials}", args.name);
        }
    })
    .map_err(|e| e.to_string())?;
    if !quiet {
        eprintln!();
    }
    let path = records_file.unwrap_or_else(records::default_records_file);
    records::append(&path, &out.records).map_err(|e| format!("{}: {e}", path.display()))?;
    let summary = serde_json::json!({
        "kernel": p.kernel.to_string(),
        "fingerprint": p.kernel.fingerprint(),
        "shapes": p.shapes,
        "strategy": strategy,
        "best_gflops": out.best_gflops,
        "best_seconds": out.best_seconds,
        "best_config": out.best.as_ref().map(|(_, text)| text.clone()),
        "trials": out.records.len(),
        "valid_trials": out.valid_trials,
        "tune_seconds": out.seconds,
        "history": out.history,
        "records": path.display().to_string(),
    });
    if json {
        println!("{summary}");
    } else {
        println!(
            "best {:.2} GFLOPS ({}) after {} trials ({} valid) in {:.1} s; records in {}",
            out.best_gflops.unwrap_or(0.0),
            out.best.as_ref().map_or("none", |(_, t)| t.as_str()),
            out.records.len(),
            out.valid_trials,
            out.seconds,
            path.display()
        );
    }
    Ok(if out.best.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

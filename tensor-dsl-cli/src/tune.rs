//! `tensor-dsl tune`: tune one kernel at one shape, append every measurement to the records.

use crate::args::problem;
use crate::KernelArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use tensor_dsl::autotune::{tune_cpu, TuneOptions, TuneOutcome};
use tensor_dsl::records;

/// What either device's tuning found, for the summary.
struct Outcome {
    best_gflops: Option<f64>,
    best_seconds: Option<f64>,
    best_config: Option<String>,
    records: Vec<records::Record>,
    valid_trials: usize,
    seconds: f64,
    history: Vec<Option<f64>>,
    default_seconds: Option<f64>,
    speedup: Option<f64>,
    summary: String,
    pick: Option<String>,
    model_accuracy: Option<f64>,
    prior_keys: usize,
}

impl<S> From<TuneOutcome<S>> for Outcome {
    fn from(o: TuneOutcome<S>) -> Outcome {
        Outcome {
            default_seconds: o.default_seconds,
            speedup: o.speedup(),
            summary: o.summary(),
            pick: o.pick.clone(),
            model_accuracy: o.model_accuracy,
            prior_keys: o.prior_keys,
            best_gflops: o.best_gflops,
            best_seconds: o.best_seconds,
            best_config: o.best.map(|(_, text)| text),
            records: o.records,
            valid_trials: o.valid_trials,
            seconds: o.seconds,
            history: o.history,
        }
    }
}

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
    svg: Option<PathBuf>,
    constant: &str,
) -> Result<ExitCode, String> {
    let p = problem(&args.name, &args.kernel, &args.shapes, &args.dtypes)?;
    let constant_inputs = constant
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            p.kernel
                .params
                .iter()
                .position(|q| q.name == n && !q.is_output)
                .ok_or_else(|| format!("--constant `{n}`: the kernel has no input of that name"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // `default` names the device's own strategy; the summary says which it was.
    let on = if device == "cuda" {
        tensor_dsl::Device::Cuda
    } else {
        tensor_dsl::Device::Cpu
    };
    let strategy = tensor_dsl::autotune::resolve_strategy(strategy, on);
    let opts = TuneOptions {
        strategy: strategy.to_string(),
        trials,
        seconds,
        seed,
        constant_inputs,
        ..TuneOptions::default()
    };
    // Progress only on a terminal: a log file gets no carriage returns.
    let show = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = |n: usize| {
        if show {
            crate::output::note(format_args!(
                "\rtensor-dsl: tuning {}: trial {n}/{trials}",
                args.name
            ));
        }
    };
    let out: Outcome = match device {
        "cpu" => tune_cpu(&p.kernel, &p.shapes, &opts, &mut progress)
            .map_err(|e| e.to_string())?
            .into(),
        "cuda" => tensor_dsl::autotune::tune_cuda(&p.kernel, &p.shapes, &opts, &mut progress)
            .map_err(|e| e.to_string())?
            .into(),
        other => return Err(format!("--device `{other}`: expected cpu or cuda")),
    };
    if show {
        // The line ends at what was done (a time budget may stop before `trials`).
        let done = out.records.len();
        crate::output::note(format_args!(
            "\rtensor-dsl: tuning {}: trial {done}/{done}{:pad$}\n",
            args.name,
            "",
            pad = trials.to_string().len()
        ));
    }
    if let Some(file) = &svg {
        let title = format!("{} {} on {device} ({strategy})", args.name, args.shapes);
        let series = [tuner::plot::Series {
            name: args.name.clone(),
            history: out.history.clone(),
        }];
        tuner::plot::draw(file, &title, &series)?;
    }
    let path = records_file.unwrap_or_else(records::default_records_file);
    records::append(&path, &out.records).map_err(|e| e.to_string())?;
    let summary = serde_json::json!({
        "kernel": p.kernel.to_string(),
        "fingerprint": p.kernel.fingerprint(),
        "dtypes": p.kernel.dtypes_text(),
        "shapes": p.shapes,
        "strategy": strategy,
        "best_gflops": out.best_gflops,
        "best_seconds": out.best_seconds,
        "best_config": out.best_config,
        "default_seconds": out.default_seconds,
        "speedup_over_default": out.speedup,
        "device": device,
        "trials": out.records.len(),
        "valid_trials": out.valid_trials,
        "tune_seconds": out.seconds,
        "history": out.history,
        "pick": out.pick,
        "model_accuracy": out.model_accuracy,
        "prior_keys": out.prior_keys,
        "records": path.display().to_string(),
        "svg": svg.as_ref().map(|f| f.display().to_string()),
    });
    if json {
        crate::output::line(&summary)?;
    } else {
        crate::output::line(format_args!(
            "{}\nbest config: {}\nrecords in {}",
            out.summary,
            out.best_config.as_deref().unwrap_or("none"),
            path.display()
        ))?;
    }
    Ok(if out.best_config.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

//! `tensor-dsl landscape` records every point of a kernel's CPU space; `tensor-dsl replay`
//! reruns search strategies offline on a recorded landscape and reports how many trials each
//! needs to reach 95% of the landscape's best.

use crate::args::problem;
use crate::KernelArgs;
use std::path::Path;
use std::process::ExitCode;
use tensor_dsl::autotune::{self, TuneOptions};
use tensor_dsl::codegen::c::CODEGEN_VERSION;
use tensor_dsl::measure::cpu::CpuMeasurer;
use tensor_dsl::records::{self, Record, RECORD_VERSION};
use tensor_dsl::runtime::cpu::simd_lanes;
use tensor_dsl::template::cpu::CpuTemplate;
use tensor_dsl::transfer::{cpu_transfer_features, Prior};
use tensor_dsl::tuned;
use tuner::{Config, Measurer, Outcome, ReplayMeasurer};

/// Measures every point of the space (up to `max`; a uniform sample of `max` valid points
/// of a larger space, and the template's default) not yet in `out` and appends the
/// records; then every valid neighbour (one knob step) of the `neighbours` fastest points,
/// so a sampled landscape is dense where searches end up, whatever the strategy; then
/// measures the `refine` fastest points twice more each, so the landscape's best is not
/// one lucky sample (the replay pools a config's samples).
pub fn record(
    args: &KernelArgs,
    out: &Path,
    max: usize,
    batch: usize,
    refine: usize,
    neighbours: usize,
) -> Result<ExitCode, String> {
    let p = problem(&args.name, &args.kernel, &args.shapes, &args.dtypes)?;
    let template = CpuTemplate::new(&p.kernel, &p.extents, simd_lanes())?;
    let fingerprint = p.kernel.fingerprint();
    let existing: Vec<Record> = records::read(out)
        .map(|(rs, _)| rs)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.kernel == fingerprint && r.shapes == p.shapes)
        .collect();
    let done: std::collections::HashSet<String> =
        existing.iter().map(|r| r.config.clone()).collect();
    let mut all = match template.space().enumerate(max) {
        Ok(all) => all,
        Err(tuner::Error::TooLarge { .. }) => sample(template.space(), max)?,
        Err(e) => return Err(e.to_string()),
    };
    // The point every search measures first.
    let default = template.default_config();
    if !all.contains(&default) {
        all.push(default);
    }
    let total = all.len();
    let missing: Vec<Config> = all
        .into_iter()
        .filter(|c| {
            template
                .space()
                .format(c)
                .map_or(true, |t| !done.contains(&t))
        })
        .collect();
    let mut measurer =
        CpuMeasurer::new(&p.kernel, &p.shapes, template.clone()).map_err(|e| e.to_string())?;
    let mut measured = measure_all(&p, &template, &mut measurer, &missing, batch, out, "points")?;
    if neighbours > 0 {
        let recorded = fastest(out, &template, &p, usize::MAX)?;
        let near: Vec<Config> = {
            let mut near = Vec::new();
            for c in recorded.iter().take(neighbours) {
                for n in template.space().neighbors(c).unwrap_or_default() {
                    if !recorded.contains(&n) && !near.contains(&n) {
                        near.push(n);
                    }
                }
            }
            near
        };
        measured += measure_all(
            &p,
            &template,
            &mut measurer,
            &near,
            batch,
            out,
            "neighbours",
        )?;
    }
    if refine > 0 {
        let top = fastest(out, &template, &p, refine)?;
        // Two rounds over the whole top set, so a drift of the machine hits them alike.
        for _ in 0..2 {
            measured += measure_all(&p, &template, &mut measurer, &top, batch, out, "refining")?;
        }
    }
    crate::output::line(
        serde_json::json!({ "space": total, "measured_now": measured, "file": out.display().to_string() }),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The `n` fastest distinct valid points of `p` recorded in `out`, fastest first (and, with
/// `n == usize::MAX`, every recorded point: the valid ones first, then the others).
fn fastest(
    out: &Path,
    template: &CpuTemplate,
    p: &crate::args::Problem,
    n: usize,
) -> Result<Vec<Config>, String> {
    let fingerprint = p.kernel.fingerprint();
    let (recs, _) = records::read(out).map_err(|e| e.to_string())?;
    let mut all: Vec<(f64, String)> = recs
        .into_iter()
        .filter(|r| r.kernel == fingerprint && r.shapes == p.shapes)
        .filter(|r| n == usize::MAX || r.seconds.is_some())
        .map(|r| (r.seconds.unwrap_or(f64::INFINITY), r.config))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut top: Vec<Config> = Vec::new();
    for (_, text) in all {
        if let Ok(c) = template.space().parse(&text) {
            if !top.contains(&c) {
                top.push(c);
            }
        }
        if top.len() == n {
            break;
        }
    }
    Ok(top)
}

/// Measures `points` in batches, appending one record each; returns how many were measured.
fn measure_all(
    p: &crate::args::Problem,
    template: &CpuTemplate,
    measurer: &mut CpuMeasurer,
    points: &[Config],
    batch: usize,
    out: &Path,
    what: &str,
) -> Result<usize, String> {
    let flops = p.kernel.flops(&p.extents);
    let target = tuned::this_cpu().clone();
    for (n, chunk) in points.chunks(batch.max(1)).enumerate() {
        let outcomes = measurer.measure(chunk);
        let recs: Vec<Record> = chunk
            .iter()
            .zip(&outcomes)
            .map(|(c, o)| Record {
                version: RECORD_VERSION,
                kernel: p.kernel.fingerprint(),
                name: p.kernel.name.clone(),
                kernel_text: p.kernel.to_string(),
                shapes: p.shapes.clone(),
                dtype: "f32".into(),
                target: target.clone(),
                codegen: CODEGEN_VERSION,
                config: template.space().format(c).unwrap_or_default(),
                seconds: o.seconds(),
                samples: match o {
                    Outcome::Valid { samples } => samples.clone(),
                    Outcome::Invalid { .. } => Vec::new(),
                },
                error: match o {
                    Outcome::Invalid { reason } => Some(reason.clone()),
                    Outcome::Valid { .. } => None,
                },
                gflops: o.seconds().map(|s| flops / s / 1e9),
                strategy: "exhaustive".into(),
                unix_time: 0,
                pair: None,
            })
            .collect();
        records::append(out, &recs).map_err(|e| e.to_string())?;
        crate::output::note(format_args!(
            "\rtensor-dsl: landscape {what}: {}/{}",
            ((n + 1) * batch.max(1)).min(points.len()),
            points.len()
        ));
    }
    crate::output::note("\n");
    Ok(points.len())
}

/// Trials to reach `share` of the best throughput, per strategy and seed.
pub fn replay(
    args: &KernelArgs,
    landscape: &Path,
    strategies: &str,
    trials: usize,
    seeds: u64,
    share: f64,
) -> Result<ExitCode, String> {
    let p = problem(&args.name, &args.kernel, &args.shapes, &args.dtypes)?;
    let template = CpuTemplate::new(&p.kernel, &p.extents, simd_lanes())?;
    let space = template.space().clone();
    let (recs, _) =
        records::read(landscape).map_err(|e| format!("{}: {e}", landscape.display()))?;
    let fingerprint = p.kernel.fingerprint();
    let points: Vec<(Config, Outcome)> = recs
        .iter()
        .filter(|r| r.kernel == fingerprint && r.shapes == p.shapes)
        .filter_map(|r| Some((space.parse(&r.config).ok()?, outcome_of(r))))
        .collect();
    if points.is_empty() {
        return Err(format!(
            "{} has no records for this kernel and shapes in the current CPU space (a \
             landscape recorded before a knob was added, e.g. k_block and simd, covers only \
             part of the space: record it again with `tensor-dsl landscape`)",
            landscape.display()
        ));
    }
    // Every config's samples pooled over its records, and their median.
    let mut samples: std::collections::HashMap<Config, Vec<f64>> = std::collections::HashMap::new();
    for (c, o) in &points {
        if let Outcome::Valid { samples: s } = o {
            samples.entry(c.clone()).or_default().extend(s);
        }
    }
    let pooled: std::collections::HashMap<Config, f64> = samples
        .into_iter()
        .filter_map(|(c, s)| Outcome::Valid { samples: s }.seconds().map(|m| (c, m)))
        .collect();
    let best = pooled.values().copied().fold(f64::INFINITY, f64::min);
    if !best.is_finite() {
        return Err("the landscape has no valid point".into());
    }
    let target = best / share;
    let names = strategy_names(strategies);
    // As tuning runs it: the portable features, through the product's one search.
    let lanes = simd_lanes();
    let features = |c: &Config| match template.decode(c) {
        Ok(cfg) => cpu_transfer_features(&p.kernel, &p.extents, &cfg, lanes),
        Err(_) => vec![0.0; tensor_dsl::transfer::CPU_TRANSFER_FEATURES],
    };
    let mut rows = Vec::new();
    for name in &names {
        let mut reached = Vec::new();
        let mut shares = Vec::new();
        for seed in 0..seeds {
            let opts = TuneOptions {
                strategy: name.clone(),
                trials,
                seed,
                ..TuneOptions::default()
            };
            let mut measurer = ReplayMeasurer::new(points.clone()).with_resampling(seed);
            // The template's default is measured among the first points; no transfer.
            let result = autotune::search(
                &space,
                Some(template.default_config()),
                &Prior::default(),
                &opts,
                &features,
                &mut measurer,
                &mut |_| {},
            )
            .map_err(|e| e.to_string())?
            .result;
            reached.push(result.trials_to_reach(target));
            // The share of the best throughput found, judged by pooled medians (the same
            // statistic as the landscape's best).
            let found = result
                .trials
                .iter()
                .filter_map(|t| pooled.get(&t.config).copied())
                .fold(f64::INFINITY, f64::min);
            shares.push(best / found);
        }
        let mut hits: Vec<usize> = reached.iter().flatten().copied().collect();
        hits.sort_unstable();
        let median = {
            let mut all: Vec<f64> = reached
                .iter()
                .map(|r| r.map_or(f64::INFINITY, |x| x as f64))
                .collect();
            all.sort_by(f64::total_cmp);
            all[all.len() / 2]
        };
        let mut sorted_shares = shares.clone();
        sorted_shares.sort_by(f64::total_cmp);
        rows.push(serde_json::json!({
            "strategy": name,
            "trials_to_95": reached,
            "median_trials_to_95": if median.is_finite() { serde_json::json!(median) } else { serde_json::json!(null) },
            "min_trials_to_95": hits.first(),
            "max_trials_to_95": if hits.len() == reached.len() { serde_json::json!(hits.last()) } else { serde_json::json!(null) },
            "seeds_reaching_95": hits.len(),
            "best_share": shares,
            "median_best_share": sorted_shares[sorted_shares.len() / 2],
        }));
    }
    crate::output::line(serde_json::json!({
        "kernel": p.kernel.to_string(),
        "shapes": p.shapes,
        "landscape_points": pooled.len(),
        "records": points.len(),
        "best_seconds": best,
        "best_gflops": p.kernel.flops(&p.extents) / best / 1e9,
        "share": share,
        "trials": trials,
        "seeds": seeds,
        "results": rows,
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// `n` distinct valid points of `space`, drawn uniformly with a fixed seed (fewer if the
/// draws keep repeating points: the space is then nearly enumerated).
fn sample(space: &tuner::SearchSpace, n: usize) -> Result<Vec<Config>, String> {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1a4d);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut misses = 0;
    while out.len() < n && misses < 20 * n.max(1) {
        let c = space.sample_uniform(&mut rng).map_err(|e| e.to_string())?;
        if seen.insert(c.clone()) {
            out.push(c);
        } else {
            misses += 1;
        }
    }
    eprintln!(
        "landscape: the space has {} raw points; measuring a uniform sample of {} valid ones",
        space.size(),
        out.len()
    );
    Ok(out)
}

/// A recorded measurement as the replay sees it: its samples, or invalid with the reason.
pub fn outcome_of(r: &Record) -> Outcome {
    match (&r.error, r.samples.is_empty()) {
        (None, false) => Outcome::Valid {
            samples: r.samples.clone(),
        },
        _ => Outcome::Invalid {
            reason: r.error.clone().unwrap_or_default(),
        },
    }
}

/// The strategies a `--strategies` list names: `all`, or names separated by commas.
pub fn strategy_names(list: &str) -> Vec<String> {
    if list == "all" {
        tuner::strategy::STRATEGY_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        list.split(',').map(|s| s.trim().to_string()).collect()
    }
}

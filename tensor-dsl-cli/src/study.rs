//! `tensor-dsl study`: every search strategy over several seeds on every recorded CPU
//! landscape (records files from `tensor-dsl landscape` or `bench --record-landscape`; a
//! file may hold several problems), judged against each landscape's best point. It writes
//! `study.json` (every run), `study.md` (the tables) and one convergence SVG per landscape
//! (mean best-so-far GFLOPS over the seeds, one line per strategy) into `--out`.
//!
//! Per landscape and strategy it reports trials-to-`share` (95%) of the best (median over
//! seeds; a seed that never gets there counts as infinite), how many seeds got there,
//! the final share of the best (mean and worst) and the run-to-run variability of the
//! final result (the ICS'24 metric): the spread `(max − min) / mean` of the final best
//! throughput across seeds, and its coefficient of variation. The replay is what the
//! product's tuning runs (the template's default measured first, the forest model on the
//! portable transfer features), minus transfer from other records; a point the landscape
//! did not record replays as invalid, so sampled landscapes judge strategies on the
//! sample.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::records::{self, Record};
use tensor_dsl::template::cpu::CpuTemplate;
use tensor_dsl::transfer::cpu_transfer_features;
use tuner::{Budget, Config, Forest, Outcome, ReplayMeasurer};

/// A point's feature vector for the cost model.
type Features = Box<dyn Fn(&Config) -> Vec<f64>>;

/// Per strategy over all landscapes: seeds that reached the target, runs, worst final
/// share, largest spread.
type Overall = (usize, usize, f64, f64);

/// One landscape: a problem's points with pooled samples.
struct Landscape {
    name: String,
    flops: f64,
    template: CpuTemplate,
    features: Features,
    points: Vec<(Config, Outcome)>,
    /// Pooled median seconds per valid config.
    pooled: HashMap<Config, f64>,
    best: f64,
}

/// The f32 SIMD lanes of a record's CPU (from its ISA flags).
fn lanes_of(r: &Record) -> usize {
    if r.target.detail.contains("avx512f") {
        16
    } else if r.target.detail.contains("avx2") {
        8
    } else {
        4
    }
}

fn landscapes_of(file: &Path) -> Result<Vec<Landscape>, String> {
    let (recs, _) = records::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut groups: Vec<(records::Key, Vec<Record>)> = Vec::new();
    for r in recs.into_iter().filter(|r| r.target.device == "cpu") {
        let key = r.key();
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let stem = file
        .file_stem()
        .map_or("landscape".into(), |s| s.to_string_lossy().to_string());
    let many = groups.len() > 1;
    let mut out = Vec::new();
    for (i, (key, rs)) in groups.into_iter().enumerate() {
        let first = &rs[0];
        let kernel = parse_text(&first.name, &first.kernel_text, None)
            .map_err(|e| format!("{}: kernel `{}`: {e}", file.display(), first.kernel_text))?;
        let refs: Vec<&[usize]> = key.shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(&kernel, &refs).map_err(|e| e.to_string())?;
        let lanes = lanes_of(first);
        let template = CpuTemplate::new(&kernel, &extents, lanes)?;
        let points: Vec<(Config, Outcome)> = rs
            .iter()
            .filter_map(|r| {
                Some((
                    template.parse(&r.config).ok()?,
                    crate::landscape::outcome_of(r),
                ))
            })
            .collect();
        let mut samples: HashMap<Config, Vec<f64>> = HashMap::new();
        for (c, o) in &points {
            if let Outcome::Valid { samples: s } = o {
                samples.entry(c.clone()).or_default().extend(s);
            }
        }
        let pooled: HashMap<Config, f64> = samples
            .into_iter()
            .filter_map(|(c, s)| Outcome::Valid { samples: s }.seconds().map(|m| (c, m)))
            .collect();
        let best = pooled.values().copied().fold(f64::INFINITY, f64::min);
        if !best.is_finite() {
            continue;
        }
        let t2 = template.clone();
        let k2 = kernel.clone();
        let e2 = extents.clone();
        let features = Box::new(move |c: &Config| match t2.decode(c) {
            Ok(cfg) => cpu_transfer_features(&k2, &e2, &cfg, lanes),
            Err(_) => vec![0.0; tensor_dsl::transfer::CPU_TRANSFER_FEATURES],
        });
        out.push(Landscape {
            name: if many {
                format!("{stem}-{i}")
            } else {
                stem.clone()
            },
            flops: kernel.flops(&extents),
            template,
            features,
            points,
            pooled,
            best,
        });
    }
    Ok(out)
}

/// What one strategy did on one landscape over the seeds.
struct Row {
    strategy: String,
    trials_to_share: Vec<Option<usize>>,
    final_share: Vec<f64>,
    /// Mean best-so-far GFLOPS after each trial, over the seeds (`None` until every seed
    /// has a valid point).
    curve: Vec<Option<f64>>,
}

impl Row {
    fn median_trials(&self) -> Option<f64> {
        let mut all: Vec<f64> = self
            .trials_to_share
            .iter()
            .map(|r| r.map_or(f64::INFINITY, |x| x as f64))
            .collect();
        all.sort_by(f64::total_cmp);
        all.get(all.len() / 2).copied().filter(|m| m.is_finite())
    }
    fn hits(&self) -> usize {
        self.trials_to_share.iter().flatten().count()
    }
    fn mean_share(&self) -> f64 {
        self.final_share.iter().sum::<f64>() / self.final_share.len().max(1) as f64
    }
    fn worst_share(&self) -> f64 {
        self.final_share
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }
    /// (max − min) / mean of the final throughput across seeds.
    fn spread(&self) -> f64 {
        let max = self.final_share.iter().copied().fold(0.0, f64::max);
        let mean = self.mean_share();
        if mean > 0.0 {
            (max - self.worst_share()) / mean
        } else {
            0.0
        }
    }
    /// Standard deviation / mean of the final throughput across seeds.
    fn cv(&self) -> f64 {
        let mean = self.mean_share();
        let n = self.final_share.len().max(1) as f64;
        let var = self
            .final_share
            .iter()
            .map(|s| (s - mean) * (s - mean))
            .sum::<f64>()
            / n;
        if mean > 0.0 {
            var.sqrt() / mean
        } else {
            0.0
        }
    }
}

fn replay(
    l: &Landscape,
    strategy: &str,
    trials: usize,
    seeds: u64,
    share: f64,
) -> Result<Row, String> {
    let space = l.template.space();
    let mut row = Row {
        strategy: strategy.to_string(),
        trials_to_share: Vec::new(),
        final_share: Vec::new(),
        curve: Vec::new(),
    };
    let mut sums = vec![0.0; trials];
    let mut counts = vec![0usize; trials];
    for seed in 0..seeds {
        let budget = Budget::new(trials);
        let inner = tuner::by_name(strategy, &budget)
            .ok_or_else(|| format!("unknown strategy `{strategy}`"))?;
        let mut s = tuner::strategy::Seeded::new(vec![l.template.default_config()], inner);
        let mut measurer = ReplayMeasurer::new(l.points.clone()).with_resampling(seed);
        let mut model = Forest::new(seed);
        let result = tuner::tune(
            space,
            &mut s,
            &mut model,
            &*l.features,
            &mut measurer,
            &budget,
            seed,
            &mut |_| {},
        );
        // Judged by pooled medians, the statistic of the landscape's best.
        let mut so_far = f64::INFINITY;
        let mut reached = None;
        for (i, t) in result.trials.iter().enumerate() {
            if let Some(p) = l.pooled.get(&t.config) {
                so_far = so_far.min(*p);
            }
            if reached.is_none() && l.best / so_far >= share {
                reached = Some(i + 1);
            }
            if so_far.is_finite() && i < trials {
                sums[i] += l.flops / so_far / 1e9;
                counts[i] += 1;
            }
        }
        row.trials_to_share.push(reached);
        row.final_share.push(if so_far.is_finite() {
            l.best / so_far
        } else {
            0.0
        });
    }
    row.curve = sums
        .iter()
        .zip(&counts)
        .map(|(s, &n)| (n as u64 == seeds && n > 0).then(|| s / n as f64))
        .collect();
    Ok(row)
}

/// Runs the study (see the module docs).
pub fn run(
    files: &[PathBuf],
    strategies: &str,
    trials: usize,
    seeds: u64,
    share: f64,
    out: &Path,
) -> Result<ExitCode, String> {
    let names = crate::landscape::strategy_names(strategies);
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut json = Vec::new();
    let mut md = format!(
        "# Strategy study: {trials} trials, {seeds} seeds, target {:.0}% of each landscape's best\n\n",
        share * 100.0
    );
    let mut overall: HashMap<String, Overall> = HashMap::new();
    for file in files {
        for l in landscapes_of(file)? {
            md.push_str(&format!(
                "## {} ({} valid points recorded, {} of the space's valid points; best {:.1} GFLOPS)\n\n| strategy | median trials to {:.0}% | seeds reaching it | mean final share | worst final share | spread (max-min)/mean | CV |\n|---|---|---|---|---|---|---|\n",
                l.name,
                l.pooled.len(),
                l.template
                    .space()
                    .enumerate(1_000_000)
                    .map_or("?".to_string(), |v| v.len().to_string()),
                l.flops / l.best / 1e9,
                share * 100.0
            ));
            let mut series = Vec::new();
            let mut rows = Vec::new();
            for name in &names {
                let row = replay(&l, name, trials, seeds, share)?;
                md.push_str(&format!(
                    "| {} | {} | {}/{} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                    row.strategy,
                    row.median_trials().map_or("-".into(), |m| format!("{m}")),
                    row.hits(),
                    seeds,
                    row.mean_share(),
                    row.worst_share(),
                    row.spread(),
                    row.cv()
                ));
                let o = overall
                    .entry(name.clone())
                    .or_insert((0, 0, f64::INFINITY, 0.0));
                o.0 += row.hits();
                o.1 += seeds as usize;
                o.2 = o.2.min(row.worst_share());
                o.3 = o.3.max(row.spread());
                rows.push(serde_json::json!({
                    "strategy": row.strategy,
                    "trials_to_share": row.trials_to_share,
                    "median_trials_to_share": row.median_trials(),
                    "seeds_reaching_share": row.hits(),
                    "final_share": row.final_share,
                    "mean_final_share": row.mean_share(),
                    "worst_final_share": row.worst_share(),
                    "spread": row.spread(),
                    "cv": row.cv(),
                    "mean_best_gflops": row.curve,
                }));
                series.push(tuner::plot::Series {
                    name: row.strategy.clone(),
                    history: row.curve.clone(),
                });
            }
            let svg = out.join(format!("{}.svg", l.name));
            tuner::plot::draw(
                &svg,
                &format!("{}: mean best-so-far over {seeds} seeds", l.name),
                &series,
            )?;
            md.push_str(&format!("\n![{0}]({0}.svg)\n\n", l.name));
            json.push(serde_json::json!({
                "landscape": l.name,
                "file": file.display().to_string(),
                "points": l.pooled.len(),
                "best_seconds": l.best,
                "best_gflops": l.flops / l.best / 1e9,
                "results": rows,
            }));
        }
    }
    md.push_str(&format!(
        "## Over all landscapes\n\n| strategy | runs reaching {:.0}% | worst final share | largest spread |\n|---|---|---|---|\n",
        share * 100.0
    ));
    let mut ranked: Vec<(&String, &Overall)> = overall.iter().collect();
    ranked.sort_by(|a, b| {
        b.1 .0
            .cmp(&a.1 .0)
            .then(b.1 .2.total_cmp(&a.1 .2))
            .then(a.0.cmp(b.0))
    });
    for (name, (hits, runs, worst, spread)) in &ranked {
        md.push_str(&format!(
            "| {name} | {hits}/{runs} | {worst:.3} | {spread:.3} |\n"
        ));
    }
    let pick = ranked.first().map(|(n, _)| n.to_string());
    if let Some(p) = &pick {
        md.push_str(&format!(
            "\nMost runs reaching the target (ties: best worst case): **{p}**.\n"
        ));
    }
    let report = serde_json::json!({
        "trials": trials,
        "seeds": seeds,
        "share": share,
        "landscapes": json,
        "best_strategy": pick,
    });
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(out.join("study.json"), text).map_err(|e| e.to_string())?;
    std::fs::write(out.join("study.md"), &md).map_err(|e| e.to_string())?;
    crate::output::line(format_args!(
        "{md}\nwrote {}",
        out.join("study.md").display()
    ))?;
    Ok(ExitCode::SUCCESS)
}

//! Tuning one kernel on the CPU: the template's space searched by a `tuner` strategy, each
//! point measured by `CpuMeasurer` (isolated child processes, output checked against the
//! reference), every trial reported to a callback (progress, landscape records).
//!
//! It runs the one search of the product ([`tensor_dsl::autotune::search`], what
//! `tensor-dsl tune`, first-call and build-time tuning run) with the same inputs as
//! `tune_cpu`: the portable transfer features, and a cost model warm-started from every
//! record at hand (the embedded set and the user cache, [`tensor_dsl::transfer::cpu_prior`]).
//! Two policies:
//! - as in `tune_cpu`, the first trials are the transfer pick, the model's pick and the
//!   template's heuristic default (what a call uses when nothing is tuned), so the tuned
//!   result is never worse than the untuned one; the other trials are the strategy's
//!   (`--pure-search` leaves out the default and the transfer: the strategy alone);
//! - bench only: a candidate more than `kill_factor` times slower than the best so far (or slower than
//!   an absolute floor) is killed by the measurer's timeout and recorded as invalid, so one
//!   terrible point cannot eat minutes of a 2-core machine.

use std::time::Duration;
use tensor_dsl::autotune::TuneOptions;
use tensor_dsl::measure::cpu::CpuMeasurer;
use tensor_dsl::records::Target;
use tensor_dsl::runtime::cpu::simd_lanes;
use tensor_dsl::template::cpu::CpuTemplate;
use tensor_dsl::transfer::{self, Prior};
use tuner::{Config, Measurer, Outcome, SearchSpace, Trial};

use crate::landscape::Landscape;
use crate::report::KernelResult;
use crate::run::Options;
use crate::workloads::{Problem, Workload};

/// What a tuning run produced.
pub struct Tuned {
    /// The fastest valid point and its median seconds.
    pub best: Option<(Config, f64)>,
    pub trials: Vec<Trial>,
    /// Best-so-far seconds after each trial (`None` before the first valid one).
    pub history: Vec<Option<f64>>,
    /// Wall time of the search, builds and measurements included.
    pub seconds: f64,
    /// Why the search stopped (`Trials`, `Time` or `Exhausted`).
    pub stopped: String,
}

impl Tuned {
    /// Writes the search's part of the report (trials, time, history, the winner) and
    /// returns the winner; `default` is the template's default point.
    pub fn report(
        self,
        r: &mut KernelResult,
        space: &SearchSpace,
        default: Option<&Config>,
    ) -> Result<Config, String> {
        let gflops = |s: f64| r.flops / s / 1e9;
        r.trials = self.trials.len();
        r.valid_trials = self.trials.iter().filter(|t| t.outcome.is_valid()).count();
        r.tune_seconds = self.seconds;
        r.stopped = Some(self.stopped);
        r.history = self.history.iter().map(|h| h.map(gflops)).collect();
        let (best, best_seconds) = self
            .best
            .ok_or_else(|| format!("no valid trial among {} (see the landscape)", r.trials))?;
        r.tuned_gflops = Some(gflops(best_seconds));
        r.best_config = space.format(&best).ok();
        r.best_is_default = Some(default == Some(&best));
        Ok(best)
    }
}

/// The search parameters shared by every kernel.
pub struct Settings {
    pub strategy: String,
    pub trials: usize,
    pub batch: usize,
    pub seconds: Option<f64>,
    pub seed: u64,
    /// Measure the heuristic default as the first trial.
    pub start_from_default: bool,
    /// Kill candidates this many times slower than the best so far (0: never).
    pub kill_factor: f64,
    /// Kill candidates slower than this many GFLOPS.
    pub floor_gflops: f64,
}

impl Settings {
    /// The default the search measures among its first points, unless `--pure-search`.
    pub fn default_point(&self, default: Config) -> Option<Config> {
        self.start_from_default.then_some(default)
    }
}

/// The strategies `--strategy` accepts (besides `default`).
pub fn strategy_names() -> Vec<&'static str> {
    tuner::strategy::STRATEGY_NAMES.to_vec()
}

/// Whether `--strategy NAME` names a strategy.
pub fn is_strategy(name: &str) -> bool {
    tuner::strategy::by_name(name, &tuner::Budget::new(1)).is_some()
}

/// A measurer whose per-call limit follows the best time so far: a candidate slower than
/// `kill_factor` times the best (or than `floor_gflops`) is cut off, so one terrible point
/// cannot eat minutes. `apply` turns the per-call limit in seconds into the measurer's own
/// setting (the CPU runner's timeout, the GPU measurer's per-launch limit).
pub struct Bounded<'a, M: Measurer> {
    pub inner: &'a mut M,
    pub apply: fn(&mut M, f64),
    pub flops: f64,
    pub kill_factor: f64,
    pub floor_gflops: f64,
    pub best: Option<f64>,
}

impl<M: Measurer> Bounded<'_, M> {
    /// Seconds per call above which a candidate is cut off.
    fn per_call(&self) -> f64 {
        let mut per_call = self.flops / (self.floor_gflops.max(1e-3) * 1e9);
        if let Some(b) = self.best.filter(|_| self.kill_factor > 0.0) {
            per_call = per_call.min(self.kill_factor * b);
        }
        per_call
    }

    fn note(&mut self, outcomes: &[Outcome]) {
        for s in outcomes.iter().filter_map(Outcome::seconds) {
            self.best = Some(self.best.map_or(s, |b| b.min(s)));
        }
    }
}

impl<M: Measurer> Measurer for Bounded<'_, M> {
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        (self.apply)(self.inner, self.per_call());
        let out = self.inner.measure(batch);
        self.note(&out);
        out
    }

    fn remeasure(&mut self, config: &Config) -> Outcome {
        (self.apply)(self.inner, self.per_call());
        let out = self.inner.remeasure(config);
        self.note(std::slice::from_ref(&out));
        out
    }
}

/// The CPU runner makes at least 4 calls (one checked, three timed): allow 4 calls at the
/// limit plus a second of start-up, never under 2 s.
fn cpu_timeout(m: &mut CpuMeasurer, per_call: f64) {
    m.timeout = Duration::from_secs_f64((1.0 + 4.0 * per_call).clamp(2.0, 120.0));
}

/// Tunes with `settings`, calling `on_trial` after every measured point.
pub fn tune(
    problem: &Problem,
    template: &CpuTemplate,
    measurer: &mut CpuMeasurer,
    settings: &Settings,
    on_trial: &mut dyn FnMut(&Trial),
) -> Result<Tuned, String> {
    let lanes = simd_lanes();
    let features = |c: &Config| match template.decode(c) {
        Ok(cfg) => transfer::cpu_transfer_features(&problem.kernel, &problem.extents, &cfg, lanes),
        Err(_) => vec![0.0; transfer::CPU_TRANSFER_FEATURES],
    };
    // As `tune_cpu`: learn from every record at hand (none with `--pure-search`).
    let prior = if settings.start_from_default {
        transfer::cpu_prior(
            &problem.kernel,
            &problem.shapes,
            &transfer::available_records(),
        )
    } else {
        Prior::default()
    };
    let mut bounded = Bounded {
        flops: measurer.flops(),
        inner: measurer,
        apply: cpu_timeout,
        kill_factor: settings.kill_factor,
        floor_gflops: settings.floor_gflops,
        best: None,
    };
    search(
        template.space(),
        settings.default_point(template.default_config()),
        &prior,
        settings,
        &features,
        &mut bounded,
        on_trial,
    )
}

/// [`tensor_dsl::autotune::search`] (what the product's tuning runs) with the bench's
/// settings: `default` measured among the first points (`None`: a pure search), the cost
/// model warm-started from `prior`.
pub fn search(
    space: &SearchSpace,
    default: Option<Config>,
    prior: &Prior,
    settings: &Settings,
    features: &dyn Fn(&Config) -> Vec<f64>,
    measurer: &mut dyn Measurer,
    on_trial: &mut dyn FnMut(&Trial),
) -> Result<Tuned, String> {
    let opts = TuneOptions {
        strategy: settings.strategy.clone(),
        trials: settings.trials,
        seconds: settings.seconds,
        batch: settings.batch.max(1),
        seed: settings.seed,
        ..TuneOptions::default()
    };
    let searched =
        tensor_dsl::autotune::search(space, default, prior, &opts, features, measurer, on_trial)
            .map_err(|e| e.to_string())?;
    let (result, seconds) = (searched.result, searched.seconds);
    Ok(Tuned {
        best: result.best,
        trials: result.trials,
        history: result.history,
        seconds,
        stopped: format!("{:?}", result.stopped),
    })
}

/// What the bench does with every trial: append it to the kernel's landscape, and with
/// `-v` print a line.
pub struct TrialLog<'a> {
    pub label: String,
    pub space: &'a SearchSpace,
    pub landscape: Option<Landscape>,
    pub total: usize,
    pub flops: f64,
    pub verbose: bool,
    seen: usize,
    best: Option<f64>,
    landscape_error: Option<String>,
}

impl<'a> TrialLog<'a> {
    /// The log of one workload's search over `space`; with `--record-landscape`, its records
    /// name `target` and the generator's `codegen` version.
    pub fn new(
        w: &Workload,
        problem: &Problem,
        opts: &Options<'_>,
        space: &'a SearchSpace,
        target: Target,
        codegen: u32,
    ) -> TrialLog<'a> {
        let landscape = opts.landscape.map(|dir| {
            Landscape::new(
                dir,
                &w.suite,
                &w.name,
                problem,
                &opts.settings.strategy,
                target,
                codegen,
            )
        });
        TrialLog {
            label: format!("{}/{}", w.suite, w.name),
            space,
            landscape,
            total: opts.settings.trials,
            flops: problem.flops(),
            verbose: opts.verbose,
            seen: 0,
            best: None,
            landscape_error: None,
        }
    }

    pub fn trial(&mut self, t: &Trial) {
        self.seen += 1;
        let gflops = |s: f64| self.flops / s / 1e9;
        let s = t.outcome.seconds();
        if let Some(s) = s {
            self.best = Some(self.best.map_or(s, |b: f64| b.min(s)));
        }
        if let Some(l) = &self.landscape {
            if let Err(e) = l.append(self.space, t) {
                self.landscape_error.get_or_insert(e);
            }
        }
        if self.verbose {
            let now = match (&t.outcome, s) {
                (_, Some(s)) => format!("{:.1} GFLOPS", gflops(s)),
                (Outcome::Invalid { reason }, None) => {
                    format!("invalid ({})", reason.lines().next().unwrap_or(""))
                }
                _ => "invalid".into(),
            };
            eprintln!(
                "  {} trial {}/{}: {now}; best {}",
                self.label,
                self.seen,
                self.total,
                self.best
                    .map_or("-".into(), |b| format!("{:.1} GFLOPS", gflops(b)))
            );
        }
    }

    /// Warns once if the landscape could not be written.
    pub fn finish(self) {
        if let Some(e) = self.landscape_error {
            eprintln!("bench: warning: the landscape could not be written: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tuner::{SyntheticMeasurer, Value};

    fn settings(start_from_default: bool) -> Settings {
        Settings {
            strategy: "opevo-droplet".into(),
            trials: 6,
            batch: 2,
            seconds: None,
            seed: 0,
            start_from_default,
            kill_factor: 0.0,
            floor_gflops: 0.0,
        }
    }

    /// The bench tunes through the product's one search: the prior's measured best is the
    /// first point measured, then the default; `--pure-search` measures neither first.
    #[test]
    fn bench_search_is_the_products_search_with_transfer() {
        let mut b = SearchSpace::builder();
        b.discrete("x", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let space = b.build().unwrap();
        let point = |x: usize| Config::new(vec![Value::Discrete(x)]);
        let x = |c: &Config| match c.values()[0] {
            Value::Discrete(i) => i as f64,
            _ => 0.0,
        };
        let features = |c: &Config| vec![x(c)];
        let (default, learned) = (point(0), point(4));
        let prior = Prior {
            features: vec![vec![4.0], vec![0.0]],
            scores: vec![0.0, -1.0],
            weights: vec![1.0, 1.0],
            candidates: vec![learned.clone()],
            keys: 1,
            evidence: vec![(learned.clone(), 0.0)],
            default_score: None,
        };
        let mut m = SyntheticMeasurer::new(move |c| Some(1.0 + (x(c) - 4.0).abs()));
        let mut seen = Vec::new();
        let tuned = search(
            &space,
            settings(true).default_point(default.clone()),
            &prior,
            &settings(true),
            &features,
            &mut m,
            &mut |t| seen.push(t.config.clone()),
        )
        .unwrap();
        assert_eq!(seen[0], learned);
        assert!(seen[..3].contains(&default), "{seen:?}");
        assert_eq!(tuned.trials.len(), 6);
        assert_eq!(tuned.best.unwrap().0, learned);

        // A pure search: the strategy alone, no transfer, no default first.
        let pure = settings(false);
        assert_eq!(pure.default_point(default.clone()), None);
        let tuned = search(
            &space,
            pure.default_point(default),
            &Prior::default(),
            &pure,
            &features,
            &mut SyntheticMeasurer::new(|_| Some(1.0)),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(tuned.trials.len(), 6);
    }
}

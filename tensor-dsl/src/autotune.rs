//! Tuning one kernel at one shape on the CPU: the template's space, the isolated measurer,
//! a strategy from [`tuner`], a learned cost model; every measurement becomes a
//! [`Record`]. Used by `tensor-dsl tune`, first-call tuning and [`crate::build::tune`].
//!
//! ```no_run
//! use tensor_dsl::{autotune::{tune_cpu, TuneOptions}, ir::parse_text};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes = vec![vec![256, 256], vec![256, 256], vec![256, 256]];
//! let out = tune_cpu(&k, &shapes, &TuneOptions::default(), &mut |_| {}).unwrap();
//! println!("best {:?} GFLOPS after {} trials", out.best_gflops, out.records.len());
//! ```

use crate::codegen::c::CODEGEN_VERSION;
use crate::ir::{bind, Kernel};
use crate::measure::cpu::CpuMeasurer;
use crate::records::{Record, RECORD_VERSION};
use crate::runtime::cpu::simd_lanes;
use crate::template::cpu::{CpuConfig, CpuTemplate};
use crate::transfer::{self, Prior};
use crate::{tuned, Error};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tuner::tune::{tune, Budget, StopReason, TuneResult};
use tuner::{Config, CostModel, Forest, Measurer, SearchSpace, Trial};

/// The strategy CPU tuning uses by default: Droplet (coordinate descent from the best
/// measured point, the template's default first, moving only on a statistically better
/// neighbour, descending again from untouched seeds at a local optimum). Set only from
/// data: the winner of `tensor-dsl study` (most landscapes passing the 32/64-trial
/// thresholds, ties to the best worst ratio, then the smallest spread, both on a grid of
/// 0.005, then to the incumbent) on the latest committed cold study of today's CPU spaces,
/// `bench/results/strategies-<date>-cpu-v<N>/study.json` (`bench/landscapes.sh` records
/// it); a test in `tensor-dsl-cli/tests/study.rs` fails when that study names another
/// winner. The 2026-11-26 study (v5 spaces, 135–146 points a landscape): 7 of 7 landscapes
/// passed, worst ratio 0.985 at 32 and 64 trials, no spread across 10 seeds, and the same
/// when every run first learns from the kernel's other shapes; the next best cold,
/// `combined`, passed 6 of 7.
pub const CPU_DEFAULT_STRATEGY: &str = "droplet";

/// The strategy GPU tuning uses by default: explore (model-guided evolution for 60% of the
/// budget), then Droplet from the best point, exploring again when it stops. Set from the
/// first GPU measurements (H100, 2026-11-25, `bench/results/2026-11-25-cuda-h100/`): Droplet
/// alone stops at a local optimum after 14–25 of 64 trials on the long-reduction fp32 GEMMs
/// (512×1024×4096, 512×768×3072) at 0.74–0.75 of cuBLAS, where this reached 0.88–0.92 by
/// trading block rows for split-K steps, two knobs at once.
pub const GPU_DEFAULT_STRATEGY: &str = "combined";

/// The strategy name that stands for the device's own default ([`default_strategy`]).
pub const DEFAULT_STRATEGY_NAME: &str = "default";

/// The strategy tuning uses on `device` unless told otherwise: [`GPU_DEFAULT_STRATEGY`] on
/// CUDA, [`CPU_DEFAULT_STRATEGY`] elsewhere.
///
/// ```
/// use tensor_dsl::autotune::{default_strategy, resolve_strategy};
/// use tensor_dsl::Device;
/// assert_eq!(default_strategy(Device::Cuda), "combined");
/// assert_eq!(resolve_strategy("default", Device::Cpu), "droplet");
/// assert_eq!(resolve_strategy("opevo", Device::Cuda), "opevo");
/// ```
pub fn default_strategy(device: crate::Device) -> &'static str {
    match device {
        crate::Device::Cuda => GPU_DEFAULT_STRATEGY,
        crate::Device::Cpu | crate::Device::Reference => CPU_DEFAULT_STRATEGY,
    }
}

/// `name`, or the device's default strategy when `name` is [`DEFAULT_STRATEGY_NAME`].
pub fn resolve_strategy(name: &str, device: crate::Device) -> &str {
    if name == DEFAULT_STRATEGY_NAME {
        default_strategy(device)
    } else {
        name
    }
}

/// The learned cost model a search uses, made fresh for each search from its seed: the
/// random forest by default; any [`tuner::CostModel`] can be passed in.
///
/// ```
/// use tensor_dsl::autotune::{CostModelChoice, TuneOptions};
/// let opts = TuneOptions {
///     cost_model: CostModelChoice::new("none", |_seed| Box::new(tuner::Untrained)),
///     ..TuneOptions::default()
/// };
/// assert_eq!(opts.cost_model.name(), "none");
/// ```
#[derive(Clone)]
pub struct CostModelChoice {
    name: String,
    make: Arc<dyn Fn(u64) -> Box<dyn CostModel> + Send + Sync>,
}

impl CostModelChoice {
    /// A model made by `make(seed)`, known as `name` (two choices with one name are equal).
    pub fn new(
        name: &str,
        make: impl Fn(u64) -> Box<dyn CostModel> + Send + Sync + 'static,
    ) -> Self {
        CostModelChoice {
            name: name.into(),
            make: Arc::new(make),
        }
    }

    /// The random forest on knob and analytic features (`tuner::Forest`).
    pub fn forest() -> Self {
        Self::new("forest", |seed| Box::new(Forest::new(seed)))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A new model for a search seeded with `seed`.
    pub fn make(&self, seed: u64) -> Box<dyn CostModel> {
        (self.make)(seed)
    }
}

impl Default for CostModelChoice {
    fn default() -> Self {
        Self::forest()
    }
}

impl PartialEq for CostModelChoice {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl std::fmt::Debug for CostModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CostModelChoice({})", self.name)
    }
}

/// How to tune.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneOptions {
    /// Strategy name (see `tuner::strategy::STRATEGY_NAMES`).
    pub strategy: String,
    /// The cost model guiding the strategy (the forest by default).
    pub cost_model: CostModelChoice,
    /// Measurements, invalid ones included.
    pub trials: usize,
    /// Wall-clock limit in seconds.
    pub seconds: Option<f64>,
    /// Candidates built and measured per batch.
    pub batch: usize,
    pub seed: u64,
    /// Inputs (parameter indices) that stay unchanged between calls, as a layer's weights
    /// do: a CPU candidate that packs one of them ahead of calls is timed on it packed once
    /// (what a caller passing it as an unchanged [`crate::Tensor`] gets), not packing it at
    /// every call ([`crate::measure::cpu::CpuMeasurer::with_constant_inputs`]). First-call
    /// tuning sets it from the call: the inputs passed as tensors with a version.
    pub constant_inputs: Vec<usize>,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            strategy: DEFAULT_STRATEGY_NAME.to_string(),
            cost_model: CostModelChoice::default(),
            trials: 64,
            seconds: None,
            batch: 8,
            seed: 0,
            constant_inputs: Vec::new(),
        }
    }
}

/// What a tuning run found: `S` is the schedule type (`CpuConfig` for [`tune_cpu`],
/// `CudaSchedule` for `tune_cuda`).
#[derive(Clone, Debug)]
pub struct TuneOutcome<S = CpuConfig> {
    /// The fastest valid schedule and its text form in the template's space.
    pub best: Option<(S, String)>,
    pub best_seconds: Option<f64>,
    pub best_gflops: Option<f64>,
    /// One record per measurement, in order.
    pub records: Vec<Record>,
    /// Best-so-far GFLOPS after each trial (`None` before the first valid one).
    pub history: Vec<Option<f64>>,
    pub valid_trials: usize,
    pub seconds: f64,
    /// The template's default schedule's time (every search measures it), if it ran.
    pub default_seconds: Option<f64>,
    /// The model's pick, in the space's text form: the first point measured, or with zero
    /// trials the result itself, unmeasured ([`crate::transfer`]).
    pub pick: Option<String>,
    /// The cost model's pairwise ranking accuracy on this run's measurements, predicted
    /// before each batch was measured (`tuner::TuneResult::model_accuracy`).
    pub model_accuracy: Option<f64>,
    /// How many problems (kernel, shapes, device) of the records at hand the model learned
    /// from before measuring.
    pub prior_keys: usize,
}

impl<S> TuneOutcome<S> {
    /// How many times faster the best schedule is than the default.
    pub fn speedup(&self) -> Option<f64> {
        match (self.default_seconds, self.best_seconds) {
            (Some(d), Some(b)) if b > 0.0 => Some(d / b),
            _ => None,
        }
    }

    /// One line for a person: `default 41.2 GFLOPS -> best 118.7 GFLOPS (2.88x) after 64
    /// trials (61 valid) in 37.0 s`.
    pub fn summary(&self) -> String {
        let mut line = self.measured_summary();
        if self
            .records
            .iter()
            .all(|r| r.seconds.is_none() && r.error.is_none())
        {
            if let Some(p) = &self.pick {
                line = format!("picked {p} without measuring");
            }
        }
        if self.prior_keys > 0 {
            line.push_str(&format!(
                "; model warm-started from {} tuned problem(s)",
                self.prior_keys
            ));
        }
        if let Some(a) = self.model_accuracy {
            line.push_str(&format!("; model pairwise accuracy {a:.2}"));
        }
        line
    }

    fn measured_summary(&self) -> String {
        let gflops = |g: Option<f64>| g.map_or("-".to_string(), |g| format!("{g:.1} GFLOPS"));
        let default_gflops = match (self.default_seconds, self.best_seconds, self.best_gflops) {
            (Some(d), Some(b), Some(g)) if d > 0.0 => Some(g * b / d),
            _ => None,
        };
        format!(
            "default {} -> best {}{} after {} trials ({} valid) in {:.1} s",
            gflops(default_gflops),
            gflops(self.best_gflops),
            self.speedup()
                .map_or(String::new(), |s| format!(" ({s:.2}x)")),
            self.records.len(),
            self.valid_trials,
            self.seconds
        )
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Tunes `kernel` at `shapes` (by parameter, output included) on this CPU.
/// `on_trial(n)` is called after each measurement with the number done so far.
pub fn tune_cpu(
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    opts: &TuneOptions,
    on_trial: &mut dyn FnMut(usize),
) -> Result<TuneOutcome, Error> {
    // The budget counts the preparation too: the measurer's inputs and expected output
    // (above the interpreter's limit, the default compiled and run: 2 s of a 5 s budget
    // on a 384x768x320 matmul were spent before this clock started when it began later).
    let start = Instant::now();
    let opts = &opts.on(crate::Device::Cpu);
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs)?;
    let flops = kernel.flops(&extents);
    let template =
        CpuTemplate::new(kernel, &extents, simd_lanes()).map_err(|m| Error::Backend {
            kernel: kernel.name.clone(),
            message: m,
        })?;
    let space = template.space().clone();
    let mut measurer = CpuMeasurer::new(kernel, shapes, template.clone())?
        .with_constant_inputs(&opts.constant_inputs);
    let lanes = simd_lanes();
    // Portable features, so records of other shapes and kernels teach the model.
    let features = |c: &Config| match template.decode(c) {
        Ok(cfg) => transfer::cpu_transfer_features(kernel, &extents, &cfg, lanes),
        Err(_) => vec![0.0; transfer::CPU_TRANSFER_FEATURES],
    };
    let prior = transfer::cpu_prior(kernel, shapes, &transfer::available_records());
    let default = template.default_config();
    let Searched { result, pick, .. } = search(
        &space,
        Some(default.clone()),
        &prior,
        &within(opts, start),
        &features,
        &mut measurer,
        &mut counting(on_trial),
    )?;
    let pick = pick.unwrap_or_else(|| default.clone());
    let seconds = start.elapsed().as_secs_f64();
    crate::log::tune_time(&kernel.name, seconds, measurer.timings());
    let mut records = records_of(
        kernel,
        shapes,
        flops,
        &space,
        &result.trials,
        tuned::this_cpu(),
        CODEGEN_VERSION,
        &opts.strategy,
    );
    records.extend(pick_record(
        kernel,
        shapes,
        &space,
        &result,
        &pick,
        tuned::this_cpu(),
        CODEGEN_VERSION,
    ));
    let mut out = outcome(
        result,
        seconds,
        flops,
        records,
        &space,
        &default,
        &pick,
        |c| {
            template.decode(c).map_err(|m| Error::Backend {
                kernel: kernel.name.clone(),
                message: m,
            })
        },
    )?;
    out.prior_keys = prior.keys;
    Ok(out)
}

impl TuneOptions {
    /// These options with [`DEFAULT_STRATEGY_NAME`] replaced by `device`'s default strategy
    /// (what the records then name).
    pub fn on(&self, device: crate::Device) -> TuneOptions {
        TuneOptions {
            strategy: resolve_strategy(&self.strategy, device).to_string(),
            ..self.clone()
        }
    }
}

/// `opts` with its time budget less what has passed since `start` (preparation counts).
fn within(opts: &TuneOptions, start: Instant) -> TuneOptions {
    let mut o = opts.clone();
    o.seconds = opts
        .seconds
        .map(|s| (s - start.elapsed().as_secs_f64()).max(0.0));
    o
}

/// The record of a zero-trial run: its pick, with no time and no error (a pick, not a
/// measurement: dispatch's index and transfer skip it). Nothing when the run measured.
fn pick_record(
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    space: &SearchSpace,
    result: &TuneResult,
    pick: &Config,
    target: &crate::records::Target,
    codegen: u32,
) -> Option<Record> {
    if !result.trials.is_empty() {
        return None;
    }
    let trial = Trial {
        config: pick.clone(),
        outcome: tuner::Outcome::Valid {
            samples: Vec::new(),
        },
        pair: None,
    };
    let mut r = records_of(
        kernel,
        shapes,
        0.0,
        space,
        std::slice::from_ref(&trial),
        target,
        codegen,
        PICK_STRATEGY,
    )
    .pop()?;
    r.seconds = None;
    r.gflops = None;
    Some(r)
}

/// Rounds of side-by-side remeasurements of the default and the point that leads after a
/// search ([`tuner::confirm`]), where the trial budget has room for them.
pub const CONFIRM_ROUNDS: usize = 3;

/// Further rounds, after [`CONFIRM_ROUNDS`], while the point that leads has never been
/// measured next to the default (its measurements in the search were lucky ones), where
/// the budgets have room for them.
pub const SETTLE_ROUNDS: usize = 5;

/// The `strategy` of a zero-trial pick's record.
pub const PICK_STRATEGY: &str = "model-pick";

/// What [`search`] found.
#[derive(Clone, Debug)]
pub struct Searched {
    /// The search (no trials with a budget of zero trials).
    pub result: TuneResult,
    /// Its wall time in seconds.
    pub seconds: f64,
    /// The model's pick: the first point measured, or the answer with zero trials (`None`
    /// only for a pure search: no default, nothing learned).
    pub pick: Option<Config>,
}

/// The strategy `opts` names, with the budget it plans for; an unknown name is an
/// [`Error::InvalidSetting`] listing the valid ones.
fn strategy_of(
    opts: &TuneOptions,
    budget: &Budget,
) -> Result<Box<dyn tuner::strategy::SearchStrategy>, Error> {
    // A search outside `tune_cpu`/`tune_cuda` that was left the device's default: the host's.
    let name = resolve_strategy(&opts.strategy, crate::Device::Cpu);
    tuner::strategy::by_name(name, budget).ok_or_else(|| Error::InvalidSetting {
        name: "strategy".into(),
        value: opts.strategy.clone(),
        expected: format!(
            "default or one of {}",
            tuner::strategy::STRATEGY_NAMES.join(", ")
        ),
    })
}

/// The one search every tuning path runs (first-call tuning, `tensor-dsl tune`,
/// build-time tuning, the bench's `--trials N`, the strategy study's replays): the cost
/// model of `opts` learns `prior` first ([`Prior::teach`]); the pick ([`transfer::pick`]:
/// the default where it did as well on the kernel's other shapes, else the schedule
/// measured best there, else the default) is measured first, then the model's own pick
/// ([`transfer::model_pick`]) and `default`
/// (tuning never ends worse than not tuning), then the strategy of `opts` runs; where the
/// trial budget has room left, the point that leads and `default` are then measured side
/// by side, up to [`CONFIRM_ROUNDS`] rounds ([`tuner::confirm`]), then up to
/// [`SETTLE_ROUNDS`] more while the point that leads was never measured next to the
/// default, and the best is chosen again after each. With
/// `opts.trials == 0` nothing is measured and the pick is the answer. With a time budget
/// the run may stop early (`tuner::Budget::early_stop`): the user asked for "this many
/// seconds at most", and a settled search that the model agrees with has nothing left to
/// spend them on.
///
/// `default: None` is a pure search (the bench's `--pure-search`): no default measured
/// first, and with an empty prior no pick either; the strategy alone.
///
/// Errors: [`Error::InvalidSetting`] for an unknown strategy.
pub fn search(
    space: &SearchSpace,
    default: Option<Config>,
    prior: &Prior,
    opts: &TuneOptions,
    features: &dyn Fn(&Config) -> Vec<f64>,
    measurer: &mut dyn Measurer,
    on_trial: &mut dyn FnMut(&Trial),
) -> Result<Searched, Error> {
    let start = Instant::now();
    let mut budget = Budget::new(opts.trials)
        .with_batch(opts.batch.max(1))
        .with_early_stop(opts.seconds.is_some());
    let inner = strategy_of(opts, &budget)?;
    let mut model = opts.cost_model.make(opts.seed);
    prior.teach(model.as_mut());
    // The model's own pick needs a point to fall back on: the default, or with a pure
    // search the best schedule of the most similar prior problem.
    let top = default
        .as_ref()
        .or_else(|| prior.candidates.iter().find(|c| space.is_valid(c)))
        .map(|d| {
            transfer::model_pick(
                space,
                d,
                &prior.candidates,
                model.as_ref(),
                features,
                opts.seed,
            )
        });
    let pick = transfer::pick(space, default.as_ref(), prior, top.as_ref());
    if opts.trials == 0 {
        return Ok(Searched {
            result: TuneResult {
                best: None,
                trials: Vec::new(),
                history: Vec::new(),
                stopped: StopReason::Trials,
                model_accuracy: None,
            },
            seconds: start.elapsed().as_secs_f64(),
            pick,
        });
    }
    let mut seeds: Vec<Config> = Vec::new();
    for c in [pick.clone(), top, default.clone()].into_iter().flatten() {
        if !seeds.contains(&c) {
            seeds.push(c);
        }
    }
    budget.seconds = opts
        .seconds
        .map(|s| (s - start.elapsed().as_secs_f64()).max(0.0));
    let mut strategy = tuner::strategy::Seeded::new(seeds, inner);
    let mut result = tune(
        space,
        &mut strategy,
        model.as_mut(),
        features,
        measurer,
        &budget,
        opts.seed,
        on_trial,
    );
    // The winner against the default, measured side by side, with what is left of the
    // budgets: the trial budget is never exceeded, and with a time budget a round takes
    // at most two of the search's average trials (remeasurements compile nothing, so
    // they take less).
    if let Some(d) = &default {
        let mut room = opts.trials.saturating_sub(result.trials.len()) / 2;
        if let Some(limit) = opts.seconds {
            let spent = start.elapsed().as_secs_f64();
            let per_trial = spent / result.trials.len().max(1) as f64;
            let fit = ((limit - spent).max(0.0) / (2.0 * per_trial.max(1e-9))).floor();
            room = room.min(fit as usize);
        }
        let rounds = room.min(CONFIRM_ROUNDS);
        let settle = (room - rounds).min(SETTLE_ROUNDS);
        tuner::confirm(&mut result, d, rounds, settle, measurer, on_trial);
    }
    if let Some(a) = result.model_accuracy {
        tracing::debug!(
            target: "tensor_dsl::tune",
            accuracy = a,
            prior_keys = prior.keys,
            prior_points = prior.features.len(),
            trials = result.trials.len(),
            "cost model pairwise ranking accuracy"
        );
    }
    Ok(Searched {
        result,
        seconds: start.elapsed().as_secs_f64(),
        pick,
    })
}

/// The feature vector the cost model sees: the knob features of a point, then
/// `analytic(point)` (`analytic_len` zeros where the point does not decode), so every vector
/// of one space has the same length.
pub fn combined_features<'a>(
    space: &'a SearchSpace,
    analytic_len: usize,
    analytic: impl Fn(&Config) -> Option<Vec<f64>> + 'a,
) -> impl Fn(&Config) -> Vec<f64> + 'a {
    let knob_len = space.feature_names().len();
    move |c: &Config| {
        let mut f = space.to_features(c).unwrap_or_default();
        f.resize(knob_len, 0.0);
        match analytic(c) {
            Some(a) => f.extend(a),
            None => f.resize(knob_len + analytic_len, 0.0),
        }
        f
    }
}

/// The outcome of a search: the best point decoded into its schedule, the history in GFLOPS.
#[allow(clippy::too_many_arguments)]
fn outcome<S>(
    result: TuneResult,
    seconds: f64,
    flops: f64,
    records: Vec<Record>,
    space: &SearchSpace,
    default: &Config,
    pick: &Config,
    decode: impl Fn(&Config) -> Result<S, Error>,
) -> Result<TuneOutcome<S>, Error> {
    let gflops = |s: f64| flops / s / 1e9;
    let best = match &result.best {
        Some((config, _)) => Some((decode(config)?, space.format(config).unwrap_or_default())),
        // Zero trials: the pick, unmeasured.
        None if result.trials.is_empty() => {
            Some((decode(pick)?, space.format(pick).unwrap_or_default()))
        }
        None => None,
    };
    let best_seconds = result.best.as_ref().map(|(_, s)| *s);
    let default_seconds = result
        .trials
        .iter()
        .find(|t| t.config == *default)
        .and_then(|t| t.outcome.seconds());
    Ok(TuneOutcome {
        pick: space.format(pick).ok(),
        model_accuracy: result.model_accuracy,
        prior_keys: 0,
        default_seconds,
        best,
        best_seconds,
        best_gflops: best_seconds.map(gflops),
        valid_trials: result
            .trials
            .iter()
            .filter(|t| t.outcome.is_valid())
            .count(),
        history: result.history.iter().map(|h| h.map(gflops)).collect(),
        records,
        seconds,
    })
}

/// A trial callback that reports how many trials are done.
fn counting(on_trial: &mut dyn FnMut(usize)) -> impl FnMut(&Trial) + '_ {
    let mut done = 0;
    move |_| {
        done += 1;
        on_trial(done);
    }
}

/// One record per trial, in order.
#[allow(clippy::too_many_arguments)]
fn records_of(
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    flops: f64,
    space: &tuner::SearchSpace,
    trials: &[Trial],
    target: &crate::records::Target,
    codegen: u32,
    strategy: &str,
) -> Vec<Record> {
    let fingerprint = kernel.fingerprint();
    let text = kernel.to_string();
    trials
        .iter()
        .map(|t| {
            let secs = t.outcome.seconds();
            Record {
                version: RECORD_VERSION,
                kernel: fingerprint.clone(),
                name: kernel.name.clone(),
                kernel_text: text.clone(),
                shapes: shapes.to_vec(),
                dtype: crate::records::dtype_key(kernel),
                target: target.clone(),
                codegen,
                config: space.format(&t.config).unwrap_or_default(),
                seconds: secs,
                samples: match &t.outcome {
                    tuner::Outcome::Valid { samples } => samples.clone(),
                    tuner::Outcome::Invalid { .. } => Vec::new(),
                },
                error: match &t.outcome {
                    tuner::Outcome::Invalid { reason } => Some(reason.clone()),
                    tuner::Outcome::Valid { .. } => None,
                },
                gflops: secs.map(|s| flops / s / 1e9),
                strategy: strategy.to_string(),
                unix_time: now_unix(),
                pair: t.pair,
            }
        })
        .collect()
}

/// What a GPU tuning run found (records with target `cuda`, the GPU's name and `sm_XY`).
#[cfg(feature = "cuda")]
pub type CudaTuneOutcome = TuneOutcome<crate::template::cuda::CudaSchedule>;

/// Tunes `kernel` at `shapes` (by parameter, output included) on the GPU the CUDA runtime
/// uses: the CUDA space of the call ([`crate::template::cuda::CudaSpace`]: tensor cores for
/// half-precision GEMMs, else SIMT), [`crate::measure::cuda::CudaMeasurer`], the strategy
/// behind the default schedule as its first trial, the forest cost model on knob features
/// plus the analytic GPU features. `on_trial(n)` is called after each measurement.
///
/// Errors: [`Error::DeviceUnavailable`] without a GPU; [`Error::InvalidSetting`] for an
/// unknown strategy; shape errors.
#[cfg(feature = "cuda")]
pub fn tune_cuda(
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    opts: &TuneOptions,
    on_trial: &mut dyn FnMut(usize),
) -> Result<CudaTuneOutcome, Error> {
    use crate::measure::cuda::CudaMeasurer;
    use crate::template::cuda::CudaSpace;

    // As on the CPU, the budget counts the measurer's preparation.
    let start = Instant::now();
    let opts = &opts.on(crate::Device::Cuda);
    let info = crate::runtime::cuda::available().map_err(|reason| Error::DeviceUnavailable {
        device: "cuda".into(),
        reason,
    })?;
    let gpu = info.target();
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs)?;
    let flops = kernel.flops(&extents);
    let backend = |message: String| Error::Backend {
        kernel: kernel.name.clone(),
        message,
    };
    let template = CudaSpace::new(kernel, &extents, &refs, &gpu).map_err(backend)?;
    let space = template.space().clone();
    let default = template.default_point().map_err(backend)?;
    let mut measurer = CudaMeasurer::with_space(kernel, shapes, template.clone())?;
    // The analytic features read the SIMT nest; tensor-core points have knob features only.
    let features = transfer::cuda_features(kernel, &extents, shapes, &template, &gpu);
    let prior = transfer::cuda_prior(kernel, shapes, &gpu, &transfer::available_records());
    let Searched { result, pick, .. } = search(
        &space,
        Some(default.clone()),
        &prior,
        &within(opts, start),
        &features,
        &mut measurer,
        &mut counting(on_trial),
    )?;
    let pick = pick.unwrap_or_else(|| default.clone());
    let seconds = start.elapsed().as_secs_f64();
    let target = crate::records::Target::cuda(&info.name, info.sm());
    let mut records = records_of(
        kernel,
        shapes,
        flops,
        &space,
        &result.trials,
        &target,
        crate::codegen::cuda::CODEGEN_VERSION,
        &opts.strategy,
    );
    records.extend(pick_record(
        kernel,
        shapes,
        &space,
        &result,
        &pick,
        &target,
        crate::codegen::cuda::CODEGEN_VERSION,
    ));
    let mut out = outcome(
        result,
        seconds,
        flops,
        records,
        &space,
        &default,
        &pick,
        |c| template.decode(c).map_err(backend),
    )?;
    out.prior_keys = prior.keys;
    Ok(out)
}

#[cfg(test)]
mod summary_tests {
    use super::TuneOutcome;

    #[test]
    fn summary_names_default_best_and_speedup() {
        let o: TuneOutcome<()> = TuneOutcome {
            best: Some(((), "x=1".into())),
            best_seconds: Some(0.5),
            best_gflops: Some(100.0),
            records: Vec::new(),
            history: Vec::new(),
            valid_trials: 0,
            seconds: 3.0,
            default_seconds: Some(2.0),
            pick: None,
            model_accuracy: None,
            prior_keys: 0,
        };
        assert_eq!(o.speedup(), Some(4.0));
        let s = o.summary();
        assert!(
            s.starts_with("default 25.0 GFLOPS -> best 100.0 GFLOPS (4.00x)"),
            "{s}"
        );
        let none = TuneOutcome::<()> {
            best: None,
            best_seconds: None,
            best_gflops: None,
            default_seconds: None,
            ..o
        };
        assert_eq!(none.speedup(), None);
        assert!(none.summary().starts_with("default - -> best -"));
    }
}

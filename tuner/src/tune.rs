//! The tuning loop: propose a batch, measure it, record it, retrain the model, repeat.
//!
//! ```
//! use tuner::{tune, Budget, SearchSpace, SyntheticMeasurer, StopReason};
//! use tuner::strategy::Random;
//! use tuner::cost_model::Untrained;
//!
//! let mut b = SearchSpace::builder();
//! let t = b.factorization("tile", 16, 2);
//! let space = b.build().unwrap();
//! // 5 points: [1,16] [2,8] [4,4] [8,2] [16,1]; [4,4] is fastest, [16,1] fails.
//! let mut measurer = SyntheticMeasurer::new(move |c| {
//!     let f = c.factors(t)?;
//!     (f[0] != 16).then(|| 1.0 + ((f[0] as f64).log2() - 2.0).abs())
//! });
//! let features = |c: &tuner::Config| space.to_features(c).unwrap_or_default();
//! let budget = Budget::new(10).with_batch(2);
//! let result = tune(&space, &mut Random::new(), &mut Untrained, &features,
//!                   &mut measurer, &budget, 1, &mut |_| {});
//! assert_eq!(result.trials.len(), 5); // every point, once
//! assert_eq!(result.stopped, StopReason::Exhausted);
//! assert_eq!(result.best.unwrap().1, 1.0);
//! assert_eq!(result.history.len(), 5);
//! ```

use std::collections::HashSet;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::cost_model::CostModel;
use crate::measure::{Measurer, Outcome, Trial};
use crate::strategy::{Context, SearchStrategy};
use crate::{Config, SearchSpace};

/// How many proposals in a row may bring nothing new before the loop gives up.
const MAX_STALLS: usize = 3;

/// When to stop tuning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// The most measurements, invalid ones and remeasurements included.
    pub trials: usize,
    /// Wall-clock seconds; checked between batches, so a batch may overrun it.
    pub seconds: Option<f64>,
    /// The most configurations measured per batch (at least 1).
    pub batch: usize,
}

impl Budget {
    /// `trials` measurements, batches of 8, no time limit.
    pub fn new(trials: usize) -> Self {
        Budget {
            trials,
            seconds: None,
            batch: 8,
        }
    }

    /// Limits the wall-clock time.
    pub fn with_seconds(mut self, seconds: f64) -> Self {
        self.seconds = Some(seconds);
        self
    }

    /// Sets the batch size (at least 1).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }
}

impl Default for Budget {
    /// 64 trials in batches of 8: the project's headline budget.
    fn default() -> Self {
        Budget::new(64)
    }
}

/// Why tuning stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The trial budget is spent.
    Trials,
    /// The time budget is spent.
    Time,
    /// The strategy proposed nothing new (done, converged, or the space is used up).
    Exhausted,
}

/// What a tuning run found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneResult {
    /// The fastest valid configuration and its median seconds.
    pub best: Option<(Config, f64)>,
    /// Every measurement in order (remeasurements repeat a config).
    pub trials: Vec<Trial>,
    /// The best seconds so far after each trial (`None` until something valid ran).
    pub history: Vec<Option<f64>>,
    pub stopped: StopReason,
}

impl TuneResult {
    /// How many trials it took until the best so far was at most `seconds` (1-based).
    pub fn trials_to_reach(&self, seconds: f64) -> Option<usize> {
        self.history
            .iter()
            .position(|b| b.is_some_and(|b| b <= seconds))
            .map(|i| i + 1)
    }
}

/// The score the model is trained on: `ln(1 / seconds)` for a valid trial; an invalid one
/// scores one below the lowest valid score (0 when nothing is valid).
pub fn scores(trials: &[Trial]) -> Vec<f64> {
    let raw: Vec<Option<f64>> = trials
        .iter()
        .map(|t| seconds(&t.outcome).map(|s| -s.ln()))
        .collect();
    let floor = raw.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let invalid = if floor.is_finite() { floor - 1.0 } else { 0.0 };
    raw.into_iter().map(|s| s.unwrap_or(invalid)).collect()
}

/// The median seconds of a valid outcome, if positive and finite.
fn seconds(outcome: &Outcome) -> Option<f64> {
    outcome.seconds().filter(|s| *s > 0.0 && s.is_finite())
}

/// Tunes: asks `strategy` for batches of at most `budget.batch` configurations, measures
/// them with `measurer`, and after each batch retrains `model` on every trial so far
/// (features from `features`, scores from [`scores`]) and tells the strategy. Before each
/// proposal (and once more when a proposal is empty) it serves the strategy's
/// [`wants_remeasure`](SearchStrategy::wants_remeasure) requests with
/// [`Measurer::remeasure`]; those are trials too.
///
/// Proposals that are not valid in `space`, were measured before or repeat within the
/// batch are dropped (a well-behaved strategy makes none). It stops when the trial budget
/// is spent (invalid trials count), when the time budget is spent (checked between
/// batches), or when the strategy proposes nothing new. All randomness comes from `seed`.
/// `on_trial` sees every trial as it is recorded (progress bars, record stores).
#[allow(clippy::too_many_arguments)]
pub fn tune(
    space: &SearchSpace,
    strategy: &mut dyn SearchStrategy,
    model: &mut dyn CostModel,
    features: &dyn Fn(&Config) -> Vec<f64>,
    measurer: &mut dyn Measurer,
    budget: &Budget,
    seed: u64,
    on_trial: &mut dyn FnMut(&Trial),
) -> TuneResult {
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut trials: Vec<Trial> = Vec::new();
    let mut feats: Vec<Vec<f64>> = Vec::new();
    let mut history: Vec<Option<f64>> = Vec::new();
    let mut best: Option<(Config, f64)> = None;
    let mut seen: HashSet<Config> = HashSet::new();
    let mut stalls = 0;

    let stopped = loop {
        if trials.len() >= budget.trials {
            break StopReason::Trials;
        }
        if budget
            .seconds
            .is_some_and(|s| start.elapsed().as_secs_f64() >= s)
        {
            break StopReason::Time;
        }
        let room = budget.trials - trials.len();
        let max = budget.batch.max(1).min(room);

        let mut again = remeasure_list(strategy, &seen, room);
        let (batch, outcomes) = if !again.is_empty() {
            let outcomes = again.iter().map(|c| measurer.remeasure(c)).collect();
            (again, outcomes)
        } else {
            let proposal = {
                let mut ctx = Context {
                    space,
                    rng: &mut rng,
                    model: &mut *model,
                    features,
                    history: &trials,
                };
                strategy.propose(&mut ctx, max)
            };
            if proposal.is_empty() {
                again = remeasure_list(strategy, &seen, room);
                if again.is_empty() {
                    break StopReason::Exhausted;
                }
                let outcomes = again.iter().map(|c| measurer.remeasure(c)).collect();
                (again, outcomes)
            } else {
                let mut fresh: Vec<Config> = Vec::with_capacity(max);
                for c in proposal {
                    if fresh.len() < max
                        && !seen.contains(&c)
                        && !fresh.contains(&c)
                        && space.is_valid(&c)
                    {
                        fresh.push(c);
                    }
                }
                if fresh.is_empty() {
                    stalls += 1;
                    if stalls >= MAX_STALLS {
                        break StopReason::Exhausted;
                    }
                    continue;
                }
                let mut outcomes = measurer.measure(&fresh);
                outcomes.truncate(fresh.len());
                while outcomes.len() < fresh.len() {
                    outcomes.push(Outcome::Invalid {
                        reason: "the measurer returned no outcome".into(),
                    });
                }
                (fresh, outcomes)
            }
        };
        stalls = 0;

        let first = trials.len();
        for (config, outcome) in batch.into_iter().zip(outcomes) {
            if let Some(s) = seconds(&outcome) {
                if best.as_ref().is_none_or(|(_, b)| s < *b) {
                    best = Some((config.clone(), s));
                }
            }
            feats.push(features(&config));
            seen.insert(config.clone());
            let trial = Trial { config, outcome };
            on_trial(&trial);
            trials.push(trial);
            history.push(best.as_ref().map(|(_, s)| *s));
        }
        model.update(&feats, &scores(&trials));
        let mut ctx = Context {
            space,
            rng: &mut rng,
            model: &mut *model,
            features,
            history: &trials,
        };
        let (_, new) = trials.split_at(first);
        strategy.observe(&mut ctx, new);
    };

    TuneResult {
        best,
        trials,
        history,
        stopped,
    }
}

/// The strategy's remeasure requests that were measured before, at most `room`.
fn remeasure_list(
    strategy: &mut dyn SearchStrategy,
    seen: &HashSet<Config>,
    room: usize,
) -> Vec<Config> {
    let mut list = strategy.wants_remeasure();
    list.retain(|c| seen.contains(c));
    list.truncate(room);
    list
}

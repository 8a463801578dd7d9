//! Search strategies: each proposes batches of configurations and learns from their
//! measurements. One file per strategy:
//!
//! | name | file | idea | uses the cost model |
//! |---|---|---|---|
//! | `random` | [`random`] | uniform valid samples, no repeats | no |
//! | `evolutionary` | [`evolutionary`] | Ansor: evolve a population, rank it with the model | yes |
//! | `opevo` | [`opevo`] | OpEvo: fitness-weighted recombination + q-random walk | no |
//! | `dgd` | [`dgd`] | dynamic gradient descent over n-hop neighbours (ICS'24) | yes |
//! | `droplet` | [`droplet`] | coordinate descent with a rank-sum test (Droplet Search) | no |
//! | `combined` | [`combined`] | explore (evolutionary) for 60% of the budget, then Droplet | yes |
//!
//! Every strategy draws all its randomness from [`Context::rng`], so a run is a function of
//! the seed, and never proposes a configuration that is already in [`Context::history`] or
//! that it proposed before. [`by_name`] builds one from its name.
//!
//! ```
//! use tuner::strategy::{by_name, DEFAULT_STRATEGY};
//! use tuner::{Budget, SearchSpace, SyntheticMeasurer, cost_model::Forest};
//!
//! let mut b = SearchSpace::builder();
//! let t = b.factorization("tile", 64, 3);
//! b.discrete("unroll", &[1, 2, 4, 8]);
//! let space = b.build().unwrap();
//! // Fastest when the inner tile is 8.
//! let mut measurer = SyntheticMeasurer::new(move |c| {
//!     let inner = c.factors(t)?[2] as f64;
//!     Some(1e-3 * (1.0 + (inner.log2() - 3.0).abs()))
//! });
//! let budget = Budget::new(24);
//! let mut strategy = by_name(DEFAULT_STRATEGY, &budget).unwrap();
//! let mut model = Forest::new(0);
//! let features = |c: &tuner::Config| space.to_features(c).unwrap_or_default();
//! let result = tuner::tune(&space, strategy.as_mut(), &mut model, &features,
//!                          &mut measurer, &budget, 7, &mut |_| {});
//! let (best, seconds) = result.best.unwrap();
//! assert!(result.trials.len() <= 24);
//! assert_eq!(best.factors(t).unwrap()[2], 8);
//! assert!((seconds - 1e-3).abs() < 1e-12);
//! ```

pub mod combined;
pub mod dgd;
pub mod droplet;
pub mod evolutionary;
pub mod opevo;
pub mod random;
pub mod seeded;

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::cost_model::CostModel;
use crate::measure::Trial;
use crate::tune::Budget;
use crate::{Config, SearchSpace};

pub use combined::Combined;
pub use dgd::Dgd;
pub use droplet::Droplet;
pub use evolutionary::Evolutionary;
pub use opevo::OpEvo;
pub use random::Random;
pub use seeded::Seeded;

/// What a strategy may use while proposing: the space, a seeded RNG, the cost model (may be
/// untrained) with the feature function it was trained on, and every trial so far.
pub struct Context<'a> {
    pub space: &'a SearchSpace,
    pub rng: &'a mut StdRng,
    pub model: &'a mut dyn CostModel,
    pub features: &'a dyn Fn(&Config) -> Vec<f64>,
    pub history: &'a [Trial],
}

/// A search strategy (TVM MetaSchedule's `SearchStrategy`: generate / notify).
pub trait SearchStrategy {
    fn name(&self) -> &str;

    /// Up to `max` configurations to measure next, none measured before. An empty batch
    /// means the strategy is done.
    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config>;

    /// The measurements of the last proposed batch (or of the last remeasure request).
    fn observe(&mut self, ctx: &mut Context<'_>, trials: &[Trial]);

    /// Already measured configurations the strategy wants measured again before its next
    /// proposal (Droplet's statistical test needs more samples of close competitors). The
    /// tune loop asks before every [`propose`](Self::propose); it measures each with
    /// [`Measurer::remeasure`](crate::Measurer::remeasure), appends the outcomes to the
    /// history as ordinary trials (they count against the trial budget) and hands them to
    /// [`observe`](Self::observe). Defaults to none.
    fn wants_remeasure(&mut self) -> Vec<Config> {
        Vec::new()
    }

    /// Whether the strategy's own test says it sits at a local optimum that nothing near
    /// improves on (Droplet: every knob's best neighbour failed its rank-sum test). The tune
    /// loop may stop early on it ([`Budget::early_stop`]). Defaults to false.
    fn settled(&self) -> bool {
        false
    }
}

/// The strategy [`by_name`] builds when asked for `"default"`, chosen from the synthetic
/// benchmark (`tests/compare.rs`): Combined (model-guided evolutionary exploration for 60% of
/// the budget, then Droplet). Users of a specific target may know better: tensor-dsl's CPU
/// tuning uses `droplet`, chosen from real CPU landscapes.
pub const DEFAULT_STRATEGY: &str = "combined";

/// The names [`by_name`] knows (aliases aside).
pub const STRATEGY_NAMES: &[&str] = &[
    "random",
    "evolutionary",
    "opevo",
    "dgd",
    "droplet",
    "combined",
    "opevo-droplet",
];

/// Builds a strategy from its name: `random`, `evolutionary` (also `evolution`, `ansor`),
/// `opevo`, `dgd`, `droplet`, `combined`, `opevo-droplet` (Combined with OpEvo exploring),
/// or `default` ([`DEFAULT_STRATEGY`]). The budget
/// tells strategies that plan by it (Combined's explore share) how many trials there are.
/// Names are case-insensitive; an unknown name gives `None`.
pub fn by_name(name: &str, budget: &Budget) -> Option<Box<dyn SearchStrategy>> {
    let name = name.trim().to_ascii_lowercase();
    let name = if name == "default" {
        DEFAULT_STRATEGY.to_string()
    } else {
        name
    };
    Some(match name.as_str() {
        "random" => Box::new(Random::new()),
        "evolutionary" | "evolution" | "ansor" => Box::new(Evolutionary::new()),
        "opevo" => Box::new(OpEvo::new()),
        "dgd" => Box::new(Dgd::new()),
        "droplet" => Box::new(Droplet::new()),
        "combined" => Box::new(Combined::new(budget.trials)),
        "opevo-droplet" => Box::new(Combined::with_share(
            Box::new(OpEvo::new()),
            budget.trials,
            0.6,
        )),
        _ => return None,
    })
}

// ----- helpers shared by the strategies ---------------------------------------------------

/// How many uniform draws [`Seen::sample_unseen`] makes before listing the space instead.
const SAMPLE_TRIES: usize = 64;
/// The largest space (points before constraints) that is listed to find unmeasured points
/// once sampling keeps hitting measured ones.
const ENUMERATE_CAP: usize = 200_000;

/// The configurations a strategy must not propose: everything in the history plus its own
/// proposals. Only membership is asked of the hash set, so iteration order never leaks
/// into a decision and runs stay deterministic.
#[derive(Debug, Default, Clone)]
pub(crate) struct Seen {
    set: HashSet<Config>,
    synced: usize,
    /// The space was listed and every valid point is seen.
    exhausted: bool,
}

impl Seen {
    /// Adds the history entries not yet added (the history only grows).
    pub(crate) fn sync(&mut self, history: &[Trial]) {
        if self.synced > history.len() {
            self.synced = 0;
        }
        for t in &history[self.synced..] {
            self.set.insert(t.config.clone());
        }
        self.synced = history.len();
    }

    pub(crate) fn contains(&self, c: &Config) -> bool {
        self.set.contains(c)
    }

    /// Marks `c` as seen; false if it already was.
    pub(crate) fn insert(&mut self, c: Config) -> bool {
        self.set.insert(c)
    }

    /// A uniformly drawn valid configuration not seen yet (not marked by this call). After
    /// [`SAMPLE_TRIES`] seen draws, a small space is listed and an unseen point is drawn
    /// from the list; `None` when every point is seen or none can be found.
    pub(crate) fn sample_unseen(
        &mut self,
        space: &SearchSpace,
        rng: &mut StdRng,
    ) -> Option<Config> {
        if self.exhausted {
            return None;
        }
        for _ in 0..SAMPLE_TRIES {
            match space.sample_uniform(rng) {
                Ok(c) if !self.contains(&c) => return Some(c),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        let all = space.enumerate(ENUMERATE_CAP).ok()?;
        let unseen: Vec<Config> = all.into_iter().filter(|c| !self.contains(c)).collect();
        if unseen.is_empty() {
            self.exhausted = true;
        }
        unseen.choose(rng).cloned()
    }

    /// [`Seen::sample_unseen`], marked seen.
    pub(crate) fn take_unseen(&mut self, space: &SearchSpace, rng: &mut StdRng) -> Option<Config> {
        let c = self.sample_unseen(space, rng)?;
        self.insert(c.clone());
        Some(c)
    }

    /// Appends unseen uniform samples to `out` (marking them seen) until it holds `n` points
    /// or none is left.
    pub(crate) fn fill_unseen(
        &mut self,
        space: &SearchSpace,
        rng: &mut StdRng,
        out: &mut Vec<Config>,
        n: usize,
    ) {
        while out.len() < n {
            let Some(c) = self.take_unseen(space, rng) else {
                break;
            };
            out.push(c);
        }
    }

    /// A q-random-walk mutation of `from` that is not seen yet, trying `tries` walks.
    pub(crate) fn mutate_unseen(
        &self,
        space: &SearchSpace,
        from: &Config,
        q: f64,
        tries: usize,
        rng: &mut StdRng,
    ) -> Option<Config> {
        for _ in 0..tries {
            match space.mutate_q_random_walk(from, q, rng) {
                Ok(c) if !self.contains(&c) => return Some(c),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

/// The model's predicted scores for `configs` (higher is better).
pub(crate) fn predict(ctx: &Context<'_>, configs: &[Config]) -> Vec<f64> {
    if configs.is_empty() {
        return Vec::new();
    }
    let features: Vec<Vec<f64>> = configs.iter().map(|c| (ctx.features)(c)).collect();
    let mut scores = ctx.model.predict(&features);
    scores.resize(configs.len(), f64::NEG_INFINITY);
    for s in &mut scores {
        if !s.is_finite() {
            *s = f64::NEG_INFINITY;
        }
    }
    scores
}

/// Whether the model tells the configs apart (an untrained model scores all alike).
pub(crate) fn informative(scores: &[f64]) -> bool {
    scores.windows(2).any(|w| w[0] != w[1])
}

/// Indices of `scores` from best to worst; equal scores keep their order (stable).
pub(crate) fn ranked(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order
}

/// Throughput (1 / median seconds) of a trial; 0 for an invalid one.
pub(crate) fn fitness(trial: &Trial) -> f64 {
    match trial.outcome.seconds() {
        Some(s) if s > 0.0 && s.is_finite() => 1.0 / s,
        _ => 0.0,
    }
}

/// Each distinct measured config once, with its best fitness, in first-measured order.
pub(crate) fn measured_fitness(history: &[Trial]) -> Vec<(Config, f64)> {
    let mut index: HashMap<&Config, usize> = HashMap::new();
    let mut out: Vec<(Config, f64)> = Vec::new();
    for t in history {
        let f = fitness(t);
        match index.get(&t.config) {
            Some(&i) => {
                if f > out[i].1 {
                    out[i].1 = f;
                }
            }
            None => {
                index.insert(&t.config, out.len());
                out.push((t.config.clone(), f));
            }
        }
    }
    out
}

/// The `n` fittest distinct measured configs, best first (ties: first measured first).
pub(crate) fn fittest(history: &[Trial], n: usize) -> Vec<(Config, f64)> {
    let mut all = measured_fitness(history);
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    all.truncate(n);
    all
}

/// The best measured throughput so far (0 when nothing valid was measured).
pub(crate) fn best_fitness(history: &[Trial]) -> f64 {
    history.iter().map(fitness).fold(0.0, f64::max)
}

/// An index drawn with probability proportional to `weights` (uniformly when they are all
/// zero or not finite). `None` for an empty slice.
pub(crate) fn weighted_index(weights: &[f64], rng: &mut StdRng) -> Option<usize> {
    if weights.is_empty() {
        return None;
    }
    let clean = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
    let total: f64 = weights.iter().map(|&w| clean(w)).sum();
    if total <= 0.0 {
        return Some(rng.gen_range(0..weights.len()));
    }
    let mut x = rng.gen::<f64>() * total;
    for (i, &w) in weights.iter().enumerate() {
        let w = clean(w);
        if x < w {
            return Some(i);
        }
        x -= w;
    }
    weights.iter().rposition(|&w| clean(w) > 0.0)
}

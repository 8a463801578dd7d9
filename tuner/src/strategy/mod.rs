//! Search strategies: each proposes batches of configurations and learns from their
//! measurements. One file per strategy.

use crate::cost_model::CostModel;
use crate::measure::Trial;
use crate::{Config, SearchSpace};
use rand::rngs::StdRng;

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

    /// The measurements of the last proposed batch.
    fn observe(&mut self, ctx: &mut Context<'_>, trials: &[Trial]);
}

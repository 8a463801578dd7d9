//! Random search: uniform valid samples, never the same configuration twice. The baseline
//! every other strategy must beat.

use super::{Context, SearchStrategy, Seen};
use crate::measure::Trial;
use crate::Config;

/// Uniform sampling without repeats ([`SearchSpace::sample_uniform`](crate::SearchSpace::sample_uniform),
/// redrawn while the draw was measured or proposed before; a small space nearly used up is
/// listed instead). Done when every valid point has been proposed.
#[derive(Debug, Default, Clone)]
pub struct Random {
    seen: Seen,
}

impl Random {
    pub fn new() -> Self {
        Random::default()
    }
}

impl SearchStrategy for Random {
    fn name(&self) -> &str {
        "random"
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        self.seen.sync(ctx.history);
        let mut out = Vec::with_capacity(max);
        self.seen.fill_unseen(ctx.space, ctx.rng, &mut out, max);
        out
    }

    fn observe(&mut self, ctx: &mut Context<'_>, _trials: &[Trial]) {
        self.seen.sync(ctx.history);
    }
}

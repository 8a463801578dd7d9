//! Measures given starting points first (e.g. a template's heuristic default), then hands
//! over to another strategy, which sees them in the history like any other trial. A tuned
//! result is then never worse than its seeds.

use super::{Context, SearchStrategy};
use crate::measure::Trial;
use crate::Config;

/// `inner`, preceded by `seeds`.
pub struct Seeded {
    seeds: Vec<Config>,
    inner: Box<dyn SearchStrategy>,
}

impl Seeded {
    pub fn new(seeds: Vec<Config>, inner: Box<dyn SearchStrategy>) -> Seeded {
        Seeded { seeds, inner }
    }
}

impl SearchStrategy for Seeded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        let measured = |c: &Config| ctx.history.iter().any(|t| t.config == *c);
        let seeds: Vec<Config> = self
            .seeds
            .drain(..)
            .filter(|c| ctx.space.is_valid(c) && !measured(c))
            .collect();
        if seeds.is_empty() {
            return self.inner.propose(ctx, max);
        }
        let (now, later) = seeds.split_at(seeds.len().min(max.max(1)));
        self.seeds = later.to_vec();
        now.to_vec()
    }

    fn observe(&mut self, ctx: &mut Context<'_>, trials: &[Trial]) {
        self.inner.observe(ctx, trials);
    }

    fn wants_remeasure(&mut self) -> Vec<Config> {
        self.inner.wants_remeasure()
    }

    fn settled(&self) -> bool {
        self.seeds.is_empty() && self.inner.settled()
    }
}

//! Explore, then exploit: a broad search for a share of the budget, then Droplet Search
//! from the best point found (the Droplet paper's recipe).

use super::{best_fitness, Context, Droplet, Evolutionary, SearchStrategy};
use crate::measure::Trial;
use crate::Config;

/// The share of the trial budget [`Combined::new`] gives to exploration.
pub const EXPLORE_SHARE: f64 = 0.6;

/// Exploration by another strategy (model-guided [`Evolutionary`] by default) until `explore_trials` trials are in
/// the history, then [`Droplet`] from the best point. When the droplet stops at a local
/// optimum, exploration resumes; as soon as it finds a point faster than that optimum, a
/// new droplet starts from it. Remeasure requests come from the droplet.
pub struct Combined {
    explorer: Box<dyn SearchStrategy>,
    explore_trials: usize,
    droplet: Option<Droplet>,
    /// The best throughput when the last droplet converged.
    converged_at: Option<f64>,
    /// Whether the droplet made the last proposal (it gets the observation).
    droplet_active: bool,
    /// A droplet converged and nothing faster was found since (checked at each observe).
    settled: bool,
    name: String,
}

impl Combined {
    /// [`Evolutionary`] for [`EXPLORE_SHARE`] of `budget_trials` (rounded), then Droplet.
    pub fn new(budget_trials: usize) -> Self {
        Combined::with_share(Box::new(Evolutionary::new()), budget_trials, EXPLORE_SHARE)
    }

    /// `explorer` for `share` of `budget_trials` (rounded), then Droplet.
    pub fn with_share(explorer: Box<dyn SearchStrategy>, budget_trials: usize, share: f64) -> Self {
        let explore = (budget_trials as f64 * share.clamp(0.0, 1.0)).round() as usize;
        Combined::with(explorer, explore)
    }

    /// `explorer` until `explore_trials` trials are in the history, then Droplet.
    pub fn with(explorer: Box<dyn SearchStrategy>, explore_trials: usize) -> Self {
        let name = format!("combined({}+droplet)", explorer.name());
        Combined {
            explorer,
            explore_trials,
            droplet: None,
            converged_at: None,
            droplet_active: false,
            settled: false,
            name,
        }
    }

    /// How many trials go to exploration before the first droplet.
    pub fn explore_trials(&self) -> usize {
        self.explore_trials
    }
}

impl SearchStrategy for Combined {
    fn name(&self) -> &str {
        &self.name
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        let exploring = ctx.history.len() < self.explore_trials;
        if !exploring && self.droplet.is_none() {
            let improved = self
                .converged_at
                .is_none_or(|f| best_fitness(ctx.history) > f);
            if improved {
                let mut droplet = Droplet::new();
                droplet.restart = false;
                self.droplet = Some(droplet);
            }
        }
        if let Some(droplet) = &mut self.droplet {
            let batch = droplet.propose(ctx, max);
            if !batch.is_empty() {
                self.droplet_active = true;
                return batch;
            }
            if droplet.converged() {
                self.converged_at = Some(best_fitness(ctx.history));
                self.droplet = None;
            } else {
                // Waiting for a remeasure: let the loop ask for it.
                self.droplet_active = true;
                return Vec::new();
            }
        }
        self.droplet_active = false;
        self.explorer.propose(ctx, max)
    }

    fn observe(&mut self, ctx: &mut Context<'_>, trials: &[Trial]) {
        match (&mut self.droplet, self.droplet_active) {
            (Some(droplet), true) => droplet.observe(ctx, trials),
            _ => self.explorer.observe(ctx, trials),
        }
        self.settled = match &self.droplet {
            Some(droplet) => droplet.converged(),
            None => self
                .converged_at
                .is_some_and(|f| best_fitness(ctx.history) <= f),
        };
    }

    /// A droplet converged and exploration has found nothing faster since.
    fn settled(&self) -> bool {
        self.settled
    }

    fn wants_remeasure(&mut self) -> Vec<Config> {
        match &mut self.droplet {
            Some(droplet) => droplet.wants_remeasure(),
            None => Vec::new(),
        }
    }
}

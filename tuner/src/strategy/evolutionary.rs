//! Ansor's search: evolve a population of configurations, ranked by the learned cost model,
//! and measure the best predicted ones plus a few random ones.

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::Rng;

use super::{fittest, informative, predict, ranked, weighted_index, Context, SearchStrategy, Seen};
use crate::measure::Trial;
use crate::{Config, SearchSpace};

/// Ansor/TVM's evolutionary search guided by the cost model.
///
/// For every batch:
/// 1. The initial population (`population` configs) is the fittest measured configs (up to
///    `measured_share` of it) filled up with uniform samples.
/// 2. For `generations` rounds, the population is scored by the model; each child picks a
///    parent with probability ∝ its min-max-normalised predicted score (+5%, so no parent is
///    starved; uniform while the model cannot tell configs apart), then with probability
///    `mutation_prob` mutates it (a q-random walk, q = 0.5 half of the time, else a single
///    knob-neighbour step) or otherwise crosses it with a second parent chosen the same way
///    (each knob from either parent with probability ½; an invalid child is redrawn up to
///    4 times, then the first parent is mutated instead).
/// 3. Every unmeasured config met in any generation is a candidate; the batch is the best
///    predicted `(1 − eps_greedy)` share of it and an `eps_greedy` share (rounded at random)
///    of fresh uniform samples.
#[derive(Debug, Clone)]
pub struct Evolutionary {
    /// Population size (Ansor: 2048; smaller here, since our batches are small).
    pub population: usize,
    /// Generations evolved per batch (Ansor: 4).
    pub generations: usize,
    /// Probability that a child is a mutation rather than a crossover (Ansor: 0.85).
    pub mutation_prob: f64,
    /// Share of each batch drawn uniformly at random (Ansor: 0.05).
    pub eps_greedy: f64,
    /// At most this share of the initial population comes from the fittest measured configs
    /// (Ansor: 0.2).
    pub measured_share: f64,
    seen: Seen,
}

impl Default for Evolutionary {
    fn default() -> Self {
        Evolutionary {
            population: 128,
            generations: 4,
            mutation_prob: 0.85,
            eps_greedy: 0.05,
            measured_share: 0.2,
            seen: Seen::default(),
        }
    }
}

impl Evolutionary {
    pub fn new() -> Self {
        Evolutionary::default()
    }

    fn initial_population(&mut self, ctx: &mut Context<'_>) -> Vec<Config> {
        let from_measured = (self.population as f64 * self.measured_share).round() as usize;
        let mut pop: Vec<Config> = fittest(ctx.history, from_measured)
            .into_iter()
            .filter(|(_, f)| *f > 0.0)
            .map(|(c, _)| c)
            .collect();
        let mut misses = 0;
        while pop.len() < self.population && misses < 8 {
            match ctx.space.sample_uniform(ctx.rng) {
                Ok(c) => pop.push(c),
                Err(_) => misses += 1,
            }
        }
        pop
    }

    fn child(
        &self,
        space: &SearchSpace,
        pop: &[Config],
        weights: &[f64],
        rng: &mut StdRng,
    ) -> Option<Config> {
        let a = &pop[weighted_index(weights, rng)?];
        if rng.gen_bool(self.mutation_prob.clamp(0.0, 1.0)) {
            return mutate(space, a, rng);
        }
        let b = &pop[weighted_index(weights, rng)?];
        for _ in 0..4 {
            let values = a
                .values()
                .iter()
                .zip(b.values())
                .map(|(x, y)| {
                    if rng.gen_bool(0.5) {
                        x.clone()
                    } else {
                        y.clone()
                    }
                })
                .collect();
            let c = Config::new(values);
            if c != *a && c != *b && space.is_valid(&c) {
                return Some(c);
            }
        }
        mutate(space, a, rng)
    }
}

/// A q-random walk with q = 0.5 half of the time, else one knob-neighbour step (q = 0).
fn mutate(space: &SearchSpace, from: &Config, rng: &mut StdRng) -> Option<Config> {
    let q = if rng.gen_bool(0.5) { 0.5 } else { 0.0 };
    space.mutate_q_random_walk(from, q, rng).ok()
}

/// Selection weights from predicted scores: min-max normalised plus 0.05; uniform when the
/// scores do not differ.
fn selection_weights(scores: &[f64]) -> Vec<f64> {
    let finite = scores.iter().copied().filter(|s| s.is_finite());
    let lo = finite.clone().fold(f64::INFINITY, f64::min);
    let hi = finite.fold(f64::NEG_INFINITY, f64::max);
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![1.0; scores.len()];
    }
    scores
        .iter()
        .map(|&s| {
            if s.is_finite() {
                (s - lo) / (hi - lo) + 0.05
            } else {
                0.0
            }
        })
        .collect()
}

impl SearchStrategy for Evolutionary {
    fn name(&self) -> &str {
        "evolutionary"
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        self.seen.sync(ctx.history);
        if max == 0 {
            return Vec::new();
        }
        let mut pop = self.initial_population(ctx);
        let mut pool: Vec<(Config, f64)> = Vec::new();
        let mut in_pool: HashSet<Config> = HashSet::new();
        for generation in 0..=self.generations {
            let scores = predict(ctx, &pop);
            for (c, &s) in pop.iter().zip(&scores) {
                if !self.seen.contains(c) && in_pool.insert(c.clone()) {
                    pool.push((c.clone(), s));
                }
            }
            if generation == self.generations || pop.is_empty() {
                break;
            }
            let weights = selection_weights(&scores);
            let mut next = Vec::with_capacity(pop.len());
            for _ in 0..self.population {
                if let Some(c) = self.child(ctx.space, &pop, &weights, ctx.rng) {
                    next.push(c);
                }
            }
            pop = next;
        }

        let eps = self.eps_greedy.clamp(0.0, 1.0) * max as f64;
        let mut n_random = eps.floor() as usize;
        if ctx.rng.gen::<f64>() < eps - eps.floor() {
            n_random += 1;
        }
        let n_model = max.saturating_sub(n_random);
        let scores: Vec<f64> = pool.iter().map(|(_, s)| *s).collect();
        let order = if informative(&scores) {
            ranked(&scores)
        } else {
            (0..pool.len()).collect()
        };
        let mut out = Vec::with_capacity(max);
        for i in order {
            if out.len() >= n_model {
                break;
            }
            let c = &pool[i].0;
            if self.seen.insert(c.clone()) {
                out.push(c.clone());
            }
        }
        self.seen.fill_unseen(ctx.space, ctx.rng, &mut out, max);
        out
    }

    fn observe(&mut self, ctx: &mut Context<'_>, _trials: &[Trial]) {
        self.seen.sync(ctx.history);
    }
}

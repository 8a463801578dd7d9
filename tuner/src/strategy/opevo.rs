//! OpEvo (Gao et al., "OpEvo: An Evolutionary Method for Tensor Operator Optimization"):
//! fitness-weighted recombination and the q-random-walk mutation over the knobs' topology.

use rand::rngs::StdRng;

use super::{fittest, weighted_index, Context, SearchStrategy, Seen};
use crate::measure::Trial;
use crate::Config;

/// How many mutations of one recombined child are tried before another child is drawn.
const WALK_TRIES: usize = 16;
/// How many children are drawn for one offspring before a uniform sample is taken instead.
const CHILD_TRIES: usize = 16;

/// OpEvo with (λ + ρ) selection.
///
/// * Parents: the `parents` (λ = 8) fittest distinct measured configs, where fitness is
///   throughput (1 / median seconds) and an invalid point has fitness 0. Until λ points
///   have been measured, batches are uniform samples (the random initial population).
/// * Each of the `offspring` (ρ = 8, or fewer when the batch is smaller) children: two
///   parents are drawn with probability ∝ fitness (uniformly when all are 0); every knob
///   takes its value from one of the two, chosen with probability ∝ its fitness; the
///   result is mutated by a q-random walk (`q` = 0.5), which also repairs a recombination
///   that breaks a constraint (the walk's end is always valid). A child that was measured
///   or proposed before is walked again, then redrawn; OpEvo never samples the same
///   configuration twice.
/// * The model is not used.
#[derive(Debug, Clone)]
pub struct OpEvo {
    /// λ: the number of parents.
    pub parents: usize,
    /// ρ: the number of offspring per generation (per batch).
    pub offspring: usize,
    /// The continuation probability of the q-random walk.
    pub q: f64,
    seen: Seen,
}

impl Default for OpEvo {
    fn default() -> Self {
        OpEvo {
            parents: 8,
            offspring: 8,
            q: 0.5,
            seen: Seen::default(),
        }
    }
}

impl OpEvo {
    pub fn new() -> Self {
        OpEvo::default()
    }

    fn child(&self, ctx: &mut Context<'_>, parents: &[(Config, f64)]) -> Option<Config> {
        let weights: Vec<f64> = parents.iter().map(|(_, f)| *f).collect();
        for _ in 0..CHILD_TRIES {
            let a = weighted_index(&weights, ctx.rng)?;
            let b = weighted_index(&weights, ctx.rng)?;
            let child = recombine(&parents[a], &parents[b], ctx.rng);
            if let Some(c) = self
                .seen
                .mutate_unseen(ctx.space, &child, self.q, WALK_TRIES, ctx.rng)
            {
                return Some(c);
            }
        }
        None
    }
}

/// Each knob's value from `a` or `b`, chosen with probability ∝ their fitness.
fn recombine(a: &(Config, f64), b: &(Config, f64), rng: &mut StdRng) -> Config {
    let weights = [a.1, b.1];
    let values =
        a.0.values()
            .iter()
            .zip(b.0.values())
            .map(|(x, y)| match weighted_index(&weights, rng) {
                Some(1) => y.clone(),
                _ => x.clone(),
            })
            .collect();
    Config::new(values)
}

impl SearchStrategy for OpEvo {
    fn name(&self) -> &str {
        "opevo"
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        self.seen.sync(ctx.history);
        let parents = fittest(ctx.history, self.parents.max(1));
        let initial = parents.len() < self.parents.max(1);
        let n = if initial {
            max
        } else {
            max.min(self.offspring.max(1))
        };
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let next = if initial {
                None
            } else {
                self.child(ctx, &parents)
            };
            let Some(c) = next.or_else(|| self.seen.sample_unseen(ctx.space, ctx.rng)) else {
                break;
            };
            self.seen.insert(c.clone());
            out.push(c);
        }
        out
    }

    fn observe(&mut self, ctx: &mut Context<'_>, _trials: &[Trial]) {
        self.seen.sync(ctx.history);
    }
}

//! Dynamic gradient descent (ICS'24, "Accelerated Auto-Tuning of GPU Kernels for Tensor
//! Computations"): descend through the n-hop neighbourhood of the current point, ranked by
//! the cost model and measured a few at a time.

use rand::seq::SliceRandom;

use super::{fitness, fittest, informative, predict, ranked, Context, SearchStrategy, Seen};
use crate::measure::Trial;
use crate::Config;

/// Dynamic gradient descent.
///
/// The model's scores are read as log-throughput (what [`tune`](crate::tune()) trains it on),
/// so `exp(score)` is a predicted throughput; scores are used only once the model tells
/// points apart. Fitness is measured throughput (1 / median seconds; invalid ⇒ 0).
///
/// 1. **Warm-up**: the first `init_samples` (8) trials are uniform samples, so that the
///    model has data before its ranking is trusted.
/// 2. **Start**: the fittest measured point; after a local minimum, a *restart* from the
///    best-predicted of `restart_pool` (256) fresh uniform samples (a uniform sample while
///    the model is uninformative), which is measured first.
/// 3. **Step** from the current point `x` (fitness `f(x)`) at radius `n`, starting at 1:
///    the unmeasured configs within `n` hops (`SearchSpace::n_hop_neighbors`; a random
///    `max_candidates` (1024) of them when there are more) are ranked by the model, which
///    is retrained after every batch. *Score threshold*: candidates whose predicted
///    throughput is below `threshold` (0.6) × `f(x)` are not measured. The top `window` (3)
///    are measured together; `x` moves to the first of them, in ranked order, that beats
///    `f(x)`, and `n` goes back to 1.
/// 4. Otherwise the window slides: the next step re-ranks the rest of the same
///    neighbourhood with the retrained model and measures the next best 3. *Measurement
///    threshold*: if every point of the window measured below `threshold` × `f(x)`, or the
///    score threshold leaves no candidate, or the neighbourhood is used up, `n` grows by
///    one instead; past `max_hops` (3), `x` is a local minimum and the search restarts
///    (step 2).
#[derive(Debug, Clone)]
pub struct Dgd {
    /// How many ranked candidates are measured per step.
    pub window: usize,
    /// The widest neighbourhood searched before declaring a local minimum.
    pub max_hops: u32,
    /// Candidates predicted below this share of the best measured throughput are skipped.
    pub threshold: f64,
    /// Uniform samples measured before the descent starts.
    pub init_samples: usize,
    /// Uniform samples ranked by the model to pick a restart point.
    pub restart_pool: usize,
    /// At most this many n-hop neighbours are ranked per step.
    pub max_candidates: usize,
    seen: Seen,
    current: Option<(Config, f64)>,
    hops: u32,
    /// A start point proposed and not yet observed.
    pending_start: Option<Config>,
    /// The window proposed and not yet observed.
    pending_window: Vec<Config>,
    /// The n-hop list of (point, n), kept while the descent stays there.
    cache: Option<(Config, u32, Vec<Config>)>,
    restarts: usize,
}

impl Default for Dgd {
    fn default() -> Self {
        Dgd {
            window: 3,
            max_hops: 3,
            threshold: 0.6,
            init_samples: 8,
            restart_pool: 256,
            max_candidates: 1024,
            seen: Seen::default(),
            current: None,
            hops: 1,
            pending_start: None,
            pending_window: Vec::new(),
            cache: None,
            restarts: 0,
        }
    }
}

impl Dgd {
    pub fn new() -> Self {
        Dgd::default()
    }

    /// The local minima met so far (restarts).
    pub fn restarts(&self) -> usize {
        self.restarts
    }

    fn widen(&mut self) {
        self.hops += 1;
        if self.hops > self.max_hops.max(1) {
            self.current = None;
            self.hops = 1;
            self.restarts += 1;
        }
    }

    /// Unmeasured configs within `hops` of `x`, from the cache when possible.
    fn candidates(&mut self, ctx: &mut Context<'_>, x: &Config, hops: u32) -> Vec<Config> {
        let fresh = !matches!(&self.cache, Some((c, n, _)) if c == x && *n == hops);
        if fresh {
            let mut list = ctx.space.n_hop_neighbors(x, hops).unwrap_or_default();
            if list.len() > self.max_candidates {
                list.shuffle(ctx.rng);
                list.truncate(self.max_candidates);
            }
            self.cache = Some((x.clone(), hops, list));
        }
        match &self.cache {
            Some((_, _, list)) => list
                .iter()
                .filter(|c| !self.seen.contains(c))
                .cloned()
                .collect(),
            None => Vec::new(),
        }
    }

    /// A restart point: the best predicted of a pool of fresh samples.
    fn restart_point(&mut self, ctx: &mut Context<'_>) -> Option<Config> {
        let mut pool = Vec::new();
        for _ in 0..self.restart_pool.max(1) {
            match self.seen.sample_unseen(ctx.space, ctx.rng) {
                Some(c) if !pool.contains(&c) => pool.push(c),
                Some(_) => {}
                None => break,
            }
        }
        let scores = predict(ctx, &pool);
        if informative(&scores) {
            ranked(&scores).first().map(|&i| pool[i].clone())
        } else {
            pool.into_iter().next()
        }
    }
}

impl SearchStrategy for Dgd {
    fn name(&self) -> &str {
        "dgd"
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        self.seen.sync(ctx.history);
        if max == 0 {
            return Vec::new();
        }
        self.pending_start = None;
        self.pending_window.clear();
        if ctx.history.len() < self.init_samples {
            let n = max.min(self.init_samples - ctx.history.len());
            let mut out = Vec::new();
            self.seen.fill_unseen(ctx.space, ctx.rng, &mut out, n);
            if !out.is_empty() {
                return out;
            }
        }
        // Bounded: every pass either proposes, or widens (at most max_hops times per point),
        // or restarts (which proposes a start).
        for _ in 0..=(self.max_hops as usize + 2) * 4 {
            let Some((x, _)) = self.current.clone() else {
                let start = if self.restarts == 0 {
                    fittest(ctx.history, 1).into_iter().find(|(_, f)| *f > 0.0)
                } else {
                    None
                };
                match start {
                    Some((c, f)) => {
                        self.current = Some((c, f));
                        self.hops = 1;
                        continue;
                    }
                    None => {
                        let Some(c) = self.restart_point(ctx) else {
                            return Vec::new();
                        };
                        self.seen.insert(c.clone());
                        self.pending_start = Some(c.clone());
                        return vec![c];
                    }
                }
            };
            let here = self.current.as_ref().map_or(0.0, |(_, f)| *f);
            let candidates = self.candidates(ctx, &x, self.hops);
            let scores = predict(ctx, &candidates);
            let order: Vec<usize> = if informative(&scores) {
                ranked(&scores)
                    .into_iter()
                    .filter(|&i| scores[i].exp() >= self.threshold * here)
                    .collect()
            } else {
                let mut o: Vec<usize> = (0..candidates.len()).collect();
                o.shuffle(ctx.rng);
                o
            };
            if order.is_empty() {
                self.widen();
                continue;
            }
            let take = self.window.max(1).min(max);
            let window: Vec<Config> = order
                .into_iter()
                .take(take)
                .map(|i| candidates[i].clone())
                .collect();
            for c in &window {
                self.seen.insert(c.clone());
            }
            self.pending_window = window.clone();
            return window;
        }
        Vec::new()
    }

    fn observe(&mut self, ctx: &mut Context<'_>, trials: &[Trial]) {
        self.seen.sync(ctx.history);
        let fit_of = |c: &Config| trials.iter().find(|t| t.config == *c).map(fitness);
        if let Some(start) = self.pending_start.take() {
            match fit_of(&start) {
                Some(f) if f > 0.0 => {
                    self.current = Some((start, f));
                    self.hops = 1;
                }
                _ => self.current = None,
            }
            return;
        }
        let window = std::mem::take(&mut self.pending_window);
        if window.is_empty() {
            return;
        }
        let Some((_, here)) = self.current.clone() else {
            return;
        };
        let measured: Vec<(&Config, f64)> = window
            .iter()
            .filter_map(|c| fit_of(c).map(|f| (c, f)))
            .collect();
        if let Some((c, f)) = measured.iter().find(|(_, f)| *f > here) {
            self.current = Some(((*c).clone(), *f));
            self.hops = 1;
        } else if measured.iter().all(|(_, f)| *f < self.threshold * here) {
            self.widen();
        }
    }
}

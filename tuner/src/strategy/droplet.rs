//! Droplet Search (Canesche et al.): exploit like a raindrop — coordinate descent from the
//! best point, moving only when a neighbour is better with statistical confidence.

use std::collections::{HashMap, HashSet};

use super::{Context, SearchStrategy, Seen};
use crate::measure::Trial;
use crate::Config;

/// Coordinate descent with a rank-sum test.
///
/// * **Start**: the measured point with the lowest median time (all samples of a config,
///   from every trial of it, are pooled). With nothing valid measured yet, it proposes one
///   uniform sample at a time until something is valid.
/// * **Order**: the knobs are visited cyclically, those with the fewest neighbours at the
///   start point first (cheap coordinates such as an unroll list or a loop order before
///   a tiling with dozens of moves), which spends few trials on the easy wins.
/// * **Step** along knob `k`: every valid knob-`k` neighbour of the current point
///   (`SearchSpace::knob_neighbors`) that is not measured yet is proposed (one batch, split
///   when larger than the batch size). Then the fastest neighbour `b` (lowest median) is
///   compared with the current point `x`:
///   - `median(b) ≥ median(x)`: not better;
///   - `median(b) < (1 − m) · median(x)`: better, where the noise margin `m` is the larger
///     of `margin` (3%) and `noise_factor` (3) × the pooled standard deviation of the log
///     samples of `x` and `b` (so with 2% noise a neighbour must look ~6% faster);
///   - both have ≥ 2 samples and no spread at all (a noise-free measurer): better;
///   - otherwise (within the noise margin): while either has fewer than `min_samples` (6)
///     samples and fewer than `max_rounds` (2) remeasure rounds were spent on this
///     decision, both are remeasured ([`SearchStrategy::wants_remeasure`]); then `b` is
///     better iff a one-sided Mann–Whitney U test says `b`'s times are lower at
///     `alpha` (0.05) — see [`mann_whitney_less`].
///
///   If `b` is better, the point moves to `b` and stays on knob `k` (the drop keeps
///   rolling); otherwise the descent goes on with the next knob.
/// * **Restart** (with [`Droplet::restart`], the default): at a local optimum, the descent
///   starts again from the fastest measured point that no descent has stood on or
///   proposed — a point measured before the droplet ran, such as the template's default
///   next to a pick transferred from other shapes, which may lie in another basin. A
///   descent that rolls onto a point an earlier one stood on has joined that basin and
///   restarts at once.
/// * **Stop**: at a local optimum of the knob-neighbour topology (every knob in a row
///   failed to improve the point) with no start left, `propose` returns nothing.
#[derive(Debug, Clone)]
pub struct Droplet {
    /// Relative improvement taken without a test.
    pub margin: f64,
    /// Significance level of the rank-sum test.
    pub alpha: f64,
    /// Samples per side wanted before testing a close call.
    pub min_samples: usize,
    /// Remeasure rounds per decision at most.
    pub max_rounds: usize,
    /// The noise margin is at least this many times the samples' relative spread.
    pub noise_factor: f64,
    /// Descend again from points measured by others after a local optimum (see the type's
    /// docs); [`super::Combined`] turns it off, as it starts droplets itself.
    pub restart: bool,
    seen: Seen,
    /// Pooled valid samples per config, from the history.
    samples: HashMap<Config, Vec<f64>>,
    invalid: HashSet<Config>,
    synced: usize,
    current: Option<Config>,
    /// The knobs in the order the descent visits them.
    order: Vec<usize>,
    /// The position in `order` of the knob being descended.
    knob: usize,
    /// Knobs in a row that did not improve the current point.
    stale: usize,
    /// The neighbours of (current, knob) were listed.
    listed: bool,
    to_propose: Vec<Config>,
    awaiting: Vec<Config>,
    remeasure: Vec<Config>,
    rounds: usize,
    moves: usize,
    done: bool,
    /// Every point a descent stood on.
    path: HashSet<Config>,
    /// Every point this droplet proposed.
    proposed: HashSet<Config>,
    /// Descents started.
    starts: usize,
    /// Where each finished descent stopped.
    optima: Vec<Config>,
}

impl Default for Droplet {
    fn default() -> Self {
        Droplet {
            margin: 0.03,
            alpha: 0.05,
            min_samples: 6,
            max_rounds: 2,
            noise_factor: 3.0,
            restart: true,
            seen: Seen::default(),
            samples: HashMap::new(),
            invalid: HashSet::new(),
            synced: 0,
            current: None,
            order: Vec::new(),
            knob: 0,
            stale: 0,
            listed: false,
            to_propose: Vec::new(),
            awaiting: Vec::new(),
            remeasure: Vec::new(),
            rounds: 0,
            moves: 0,
            done: false,
            path: HashSet::new(),
            proposed: HashSet::new(),
            starts: 0,
            optima: Vec::new(),
        }
    }
}

/// The result of comparing the current point with its best neighbour.
enum Verdict {
    Better,
    NotBetter,
    NeedMore(Vec<Config>),
}

impl Droplet {
    pub fn new() -> Self {
        Droplet::default()
    }

    /// Whether the descents are over: a local optimum with no start left (with
    /// [`Droplet::restart`]), else the first local optimum.
    pub fn converged(&self) -> bool {
        self.done
    }

    /// The current point of the descent (once converged, the fastest of the local optima
    /// its descents stopped at).
    pub fn current(&self) -> Option<&Config> {
        self.current.as_ref()
    }

    /// How many times the point moved.
    pub fn moves(&self) -> usize {
        self.moves
    }

    /// How many descents started (1 plus the restarts).
    pub fn starts(&self) -> usize {
        self.starts
    }

    fn sync(&mut self, history: &[Trial]) {
        self.seen.sync(history);
        if self.synced > history.len() {
            self.synced = 0;
        }
        for t in &history[self.synced..] {
            match &t.outcome {
                crate::Outcome::Valid { samples } if t.outcome.is_valid() => {
                    self.samples
                        .entry(t.config.clone())
                        .or_default()
                        .extend(samples.iter().copied().filter(|s| s.is_finite()));
                }
                _ => {
                    if !self.samples.contains_key(&t.config) {
                        self.invalid.insert(t.config.clone());
                    }
                }
            }
        }
        self.synced = history.len();
        let measured = |c: &Config| self.samples.contains_key(c) || self.invalid.contains(c);
        self.awaiting.retain(|c| !measured(c));
    }

    fn median(&self, c: &Config) -> Option<f64> {
        let s = self.samples.get(c)?;
        if s.is_empty() {
            return None;
        }
        let mut s = s.clone();
        s.sort_by(f64::total_cmp);
        Some(s[s.len() / 2])
    }

    /// The measured config with the lowest median, ties broken by the config order; after
    /// the first descent, among the points no descent stood on or proposed.
    fn best_start(&self, history: &[Trial]) -> Option<Config> {
        let fresh =
            |c: &Config| self.starts == 0 || !(self.path.contains(c) || self.proposed.contains(c));
        self.fastest(history.iter().map(|t| &t.config).filter(|c| fresh(c)))
    }

    /// Of `configs`, the one with the lowest median (the first of equals).
    fn fastest<'a>(&self, configs: impl Iterator<Item = &'a Config>) -> Option<Config> {
        let mut best: Option<(f64, &Config)> = None;
        for c in configs {
            if let Some(m) = self.median(c) {
                if best.is_none_or(|(b, _)| m < b) {
                    best = Some((m, c));
                }
            }
        }
        best.map(|(_, c)| c.clone())
    }

    fn verdict(&self, x: &Config, b: &Config) -> Verdict {
        let (Some(sx), Some(sb)) = (self.samples.get(x), self.samples.get(b)) else {
            return Verdict::NotBetter;
        };
        let (Some(mx), Some(mb)) = (self.median(x), self.median(b)) else {
            return Verdict::NotBetter;
        };
        if mb >= mx {
            return Verdict::NotBetter;
        }
        // The margin grows with the noise seen in these two points' samples, so that the
        // best of many noisy neighbours is not taken on its looks alone.
        let margin = self.margin.max(self.noise_factor * log_spread(sx, sb));
        if mb < (1.0 - margin) * mx {
            return Verdict::Better;
        }
        let flat = |s: &[f64]| s.len() >= 2 && s.iter().all(|&v| v == s[0]);
        if flat(sx) && flat(sb) {
            return Verdict::Better;
        }
        if self.rounds < self.max_rounds {
            let short: Vec<Config> = [x, b]
                .into_iter()
                .filter(|c| self.samples.get(*c).map_or(0, Vec::len) < self.min_samples)
                .cloned()
                .collect();
            if !short.is_empty() {
                return Verdict::NeedMore(short);
            }
        }
        if mann_whitney_less(sb, sx) < self.alpha {
            Verdict::Better
        } else {
            Verdict::NotBetter
        }
    }

    fn next_knob(&mut self, knobs: usize) {
        self.knob = (self.knob + 1) % knobs.max(1);
        self.stale += 1;
        self.listed = false;
        self.rounds = 0;
        if self.stale >= knobs {
            self.local_optimum();
        }
    }

    /// The descent ended: stop, or (with [`Droplet::restart`]) let the next step start
    /// another from [`Droplet::best_start`].
    fn local_optimum(&mut self) {
        if !self.restart {
            self.done = true;
            return;
        }
        if let Some(c) = self.current.take() {
            self.optima.push(c);
        }
    }

    /// No start left: converged, standing on the fastest optimum.
    fn finish(&mut self) {
        self.done = true;
        self.current = self.fastest(self.optima.iter());
    }

    /// Runs the descent as far as it can go without new measurements.
    fn step(&mut self, ctx: &mut Context<'_>) {
        let knobs = ctx.space.knob_count();
        // Each pass moves (bounded by the strictly falling median), changes knob (bounded
        // by `stale`), or returns.
        for _ in 0..10_000 {
            if self.done || !self.remeasure.is_empty() {
                return;
            }
            if knobs == 0 {
                self.done = true;
                return;
            }
            let Some(x) = self.current.clone() else {
                match self.best_start(ctx.history) {
                    Some(c) => {
                        // Cheap coordinates first: fewest neighbours at the start point.
                        let mut order: Vec<(usize, usize)> = (0..knobs)
                            .map(|k| {
                                let n = ctx.space.knob_neighbors(&c, k).map_or(0, |v| v.len());
                                (n, k)
                            })
                            .collect();
                        order.sort_unstable();
                        self.order = order.into_iter().map(|(_, k)| k).collect();
                        self.path.insert(c.clone());
                        self.current = Some(c);
                        self.starts += 1;
                        self.knob = 0;
                        self.stale = 0;
                        self.listed = false;
                        continue;
                    }
                    // Nothing left to start from after a descent; before the first, nothing
                    // valid measured yet (`propose` samples).
                    None if self.starts > 0 => {
                        self.finish();
                        return;
                    }
                    None => return,
                }
            };
            let knob = self.order.get(self.knob).copied().unwrap_or(self.knob);
            let neighbours = ctx.space.knob_neighbors(&x, knob).unwrap_or_default();
            if !self.listed {
                self.to_propose = neighbours
                    .iter()
                    .filter(|c| !self.seen.contains(c))
                    .cloned()
                    .collect();
                self.listed = true;
                self.rounds = 0;
            }
            if !self.to_propose.is_empty() || !self.awaiting.is_empty() {
                return;
            }
            let mut best: Option<(f64, &Config)> = None;
            for c in &neighbours {
                if let Some(m) = self.median(c) {
                    if best.is_none_or(|(b, _)| m < b) {
                        best = Some((m, c));
                    }
                }
            }
            let verdict = match best {
                Some((_, b)) => (self.verdict(&x, b), b.clone()),
                None => (Verdict::NotBetter, x.clone()),
            };
            match verdict {
                (Verdict::Better, b) => {
                    self.moves += 1;
                    if !self.path.insert(b.clone()) {
                        // An earlier descent stood here: its basin, already descended.
                        self.local_optimum();
                        continue;
                    }
                    self.current = Some(b);
                    self.stale = 0;
                    self.listed = false;
                }
                (Verdict::NotBetter, _) => self.next_knob(knobs),
                (Verdict::NeedMore(configs), _) => {
                    self.rounds += 1;
                    self.remeasure = configs;
                    return;
                }
            }
        }
    }
}

impl SearchStrategy for Droplet {
    fn name(&self) -> &str {
        "droplet"
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        self.sync(ctx.history);
        // Anything proposed but never measured (the loop dropped it) counts as invalid.
        for c in std::mem::take(&mut self.awaiting) {
            self.invalid.insert(c);
        }
        let seen = &self.seen;
        self.to_propose.retain(|c| !seen.contains(c));
        self.step(ctx);
        if self.done || max == 0 || !self.remeasure.is_empty() {
            return Vec::new();
        }
        if self.current.is_none() {
            // Nothing valid measured yet: try a fresh sample.
            let Some(c) = self.seen.take_unseen(ctx.space, ctx.rng) else {
                return Vec::new();
            };
            self.awaiting.push(c.clone());
            return vec![c];
        }
        let n = max.min(self.to_propose.len());
        let batch: Vec<Config> = self.to_propose.drain(..n).collect();
        for c in &batch {
            self.seen.insert(c.clone());
            self.proposed.insert(c.clone());
        }
        self.awaiting.extend(batch.iter().cloned());
        batch
    }

    fn observe(&mut self, ctx: &mut Context<'_>, _trials: &[Trial]) {
        self.sync(ctx.history);
        if self.current.is_none() {
            self.awaiting.clear();
        }
        self.step(ctx);
    }

    fn settled(&self) -> bool {
        self.done
    }

    fn wants_remeasure(&mut self) -> Vec<Config> {
        std::mem::take(&mut self.remeasure)
    }
}

/// The pooled standard deviation of the logarithms of two sample sets (the relative noise
/// of a measurement); 0 when neither has two samples.
fn log_spread(a: &[f64], b: &[f64]) -> f64 {
    let (mut sum, mut dof) = (0.0, 0usize);
    for s in [a, b] {
        let logs: Vec<f64> = s.iter().filter(|v| **v > 0.0).map(|v| v.ln()).collect();
        if logs.len() < 2 {
            continue;
        }
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        sum += logs.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>();
        dof += logs.len() - 1;
    }
    if dof == 0 {
        0.0
    } else {
        (sum / dof as f64).sqrt()
    }
}

/// The one-sided p-value of the Mann–Whitney U (Wilcoxon rank-sum) test that the values of
/// `a` tend to be lower than those of `b` (`a` faster). `U` counts the pairs with
/// `a_i < b_j`, ties as ½. Exact (the null distribution by recursion over arrangements)
/// without ties and with at most 20 values per side; otherwise the normal approximation
/// with a tie-corrected variance and a continuity correction. 1 when either side is empty.
pub fn mann_whitney_less(a: &[f64], b: &[f64]) -> f64 {
    let (m, n) = (a.len(), b.len());
    if m == 0 || n == 0 {
        return 1.0;
    }
    let mut u: f64 = 0.0;
    let mut ties = false;
    for &x in a {
        for &y in b {
            if x < y {
                u += 1.0;
            } else if x == y {
                u += 0.5;
                ties = true;
            }
        }
    }
    // Ties within a side matter too for the exact distribution.
    let mut all: Vec<f64> = a.iter().chain(b).copied().collect();
    all.sort_by(f64::total_cmp);
    ties |= all.windows(2).any(|w| w[0] == w[1]);
    if !ties && m <= 20 && n <= 20 {
        let dist = u_distribution(m, n);
        let total: f64 = dist.iter().sum();
        let from = u.round() as usize;
        let tail: f64 = dist.iter().skip(from).sum();
        return (tail / total).clamp(0.0, 1.0);
    }
    let (mf, nf) = (m as f64, n as f64);
    let big_n = mf + nf;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j] == all[i] {
            j += 1;
        }
        let t = (j - i) as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    let var = mf * nf / 12.0 * ((big_n + 1.0) - tie_term / (big_n * (big_n - 1.0)));
    if var <= 0.0 {
        return if u > mf * nf / 2.0 { 0.0 } else { 1.0 };
    }
    let z = (u - mf * nf / 2.0 - 0.5) / var.sqrt();
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// `dist[u]`: the number of arrangements of `m` a's and `n` b's with `U = u`, where `U`
/// counts pairs with the a below the b. Recursion on the largest value: a b on top adds `m`.
fn u_distribution(m: usize, n: usize) -> Vec<f64> {
    // table[i][j] = distribution for (i a's, j b's)
    let mut table: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n + 1]; m + 1];
    for i in 0..=m {
        for j in 0..=n {
            let mut d = vec![0.0; i * j + 1];
            if i == 0 || j == 0 {
                d[0] = 1.0;
            } else {
                for (u, slot) in d.iter_mut().enumerate() {
                    let top_a = table[i - 1][j].get(u).copied().unwrap_or(0.0);
                    let top_b = if u >= i {
                        table[i][j - 1].get(u - i).copied().unwrap_or(0.0)
                    } else {
                        0.0
                    };
                    *slot = top_a + top_b;
                }
            }
            table[i][j] = d;
        }
    }
    table[m][n].clone()
}

/// The complementary error function (Numerical Recipes' Chebyshev fit, |error| < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_normal_agree_roughly() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [6.0, 7.0, 8.0, 9.0, 10.0];
        // All a below all b: 1 of C(10,5) = 252 arrangements.
        assert!((mann_whitney_less(&a, &b) - 1.0 / 252.0).abs() < 1e-12);
        assert!((mann_whitney_less(&b, &a) - 1.0).abs() < 1e-12);
        let three = mann_whitney_less(&a[..3], &b[..3]);
        assert!((three - 0.05).abs() < 1e-12);
        // Ties force the normal approximation.
        let p = mann_whitney_less(
            &[1.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            &[5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
        );
        assert!(p < 0.01, "{p}");
        assert!((erfc(0.0) - 1.0).abs() < 1e-6);
        assert!((0.5 * erfc(-1.959_964 / std::f64::consts::SQRT_2) - 0.975).abs() < 1e-5);
    }
}

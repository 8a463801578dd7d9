//! Factorization knobs: an extent split into ordered factors (a multi-level tiling).

use rand::Rng;

use super::bfs_ball;

/// The largest extent a factorization knob accepts (2^32). Larger extents do not occur in
/// tensors that fit in memory, and the bound keeps factoring and counting fast.
pub(crate) const MAX_EXTENT: u64 = 1 << 32;
/// The most parts a factorization knob accepts.
pub(crate) const MAX_PARTS: usize = 16;

/// An extent `n` split into `parts` ordered factors whose product is exactly `n`, e.g. the
/// five tile levels of a loop. Padding is the template's business: to tile an awkward
/// extent, ask for the factorization of the padded one.
///
/// A part may have an upper bound ([`Factorization::with_max_part`]); values that break a
/// bound are not points of the knob. One hop moves one prime factor from one part to another.
///
/// ```
/// use tuner::Factorization;
/// let tile = Factorization::new(12, 2).with_max_innermost(4);
/// // [1,12] and [2,6] break the bound on the last part.
/// assert_eq!(tile.size(), 4); // [3,4] [4,3] [6,2] [12,1]
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Factorization {
    n: u64,
    parts: usize,
    /// Bounds as given: (part, max).
    bounds: Vec<(usize, u64)>,
    /// Derived by `prepare`, or why the parameters are unusable.
    table: Result<Table, String>,
}

/// What sampling, counting and moving need, derived from `n`, `parts` and the bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    /// Per part, its upper bound (`u64::MAX` when none).
    max: Vec<u64>,
    /// The distinct primes of `n`, ascending.
    primes: Vec<u64>,
    /// The divisors of `n`, ascending.
    divisors: Vec<u64>,
    /// `counts[k][i]`: the number of ways to write `divisors[i]` as the ordered product of
    /// parts `k..parts`, each within its bound.
    counts: Vec<Vec<u128>>,
}

impl Factorization {
    /// `n` split into `parts` ordered factors. `n` must be in `1..=2^32` and `parts` in
    /// `1..=16`; a knob outside these is reported when the space is built.
    pub fn new(n: u64, parts: usize) -> Self {
        let mut k = Factorization {
            n,
            parts,
            bounds: Vec::new(),
            table: Err(String::new()),
        };
        k.table = k.prepare();
        k
    }

    /// Bounds part `part` (0 = outermost) by `max`.
    pub fn with_max_part(mut self, part: usize, max: u64) -> Self {
        self.bounds.push((part, max));
        self.table = self.prepare();
        self
    }

    /// Bounds the last (innermost) part by `max`, e.g. a vector or register tile.
    pub fn with_max_innermost(self, max: u64) -> Self {
        let last = self.parts.saturating_sub(1);
        self.with_max_part(last, max)
    }

    /// The extent.
    pub fn extent(&self) -> u64 {
        self.n
    }

    /// The number of parts.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// The upper bound of part `part`, if it has one.
    pub fn max_part(&self, part: usize) -> Option<u64> {
        self.bounds
            .iter()
            .filter(|(p, _)| *p == part)
            .map(|(_, m)| *m)
            .min()
    }

    /// The number of ordered factorizations within the bounds (0 for invalid parameters).
    pub fn size(&self) -> u128 {
        match &self.table {
            Ok(t) => t.count(0, self.n),
            Err(_) => 0,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        self.table.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    fn prepare(&self) -> Result<Table, String> {
        let (n, parts) = (self.n, self.parts);
        if n == 0 || n > MAX_EXTENT {
            return Err(format!("the extent {n} is not in 1..=2^32"));
        }
        if parts == 0 || parts > MAX_PARTS {
            return Err(format!("{parts} parts is not in 1..={MAX_PARTS}"));
        }
        let mut max = vec![u64::MAX; parts];
        for &(part, bound) in &self.bounds {
            let slot = max.get_mut(part).ok_or_else(|| {
                format!("a bound is set on part {part} but there are only {parts} parts")
            })?;
            *slot = (*slot).min(bound);
        }
        let factors = prime_factors(n);
        let primes: Vec<u64> = factors.iter().map(|&(p, _)| p).collect();
        let divisors = divisors(&factors);
        let mut counts = vec![vec![0u128; divisors.len()]; parts];
        let last = parts - 1;
        for (i, &m) in divisors.iter().enumerate() {
            counts[last][i] = u128::from(m <= max[last]);
        }
        for k in (0..last).rev() {
            for (i, &m) in divisors.iter().enumerate() {
                let mut total: u128 = 0;
                for &d in divisors.iter().take(i + 1) {
                    if d > max[k] {
                        break;
                    }
                    if m % d == 0 {
                        if let Ok(j) = divisors.binary_search(&(m / d)) {
                            total = total.saturating_add(counts[k + 1][j]);
                        }
                    }
                }
                counts[k][i] = total;
            }
        }
        let table = Table {
            max,
            primes,
            divisors,
            counts,
        };
        if table.count(0, n) == 0 {
            return Err(format!(
                "no split of {n} into {parts} factors satisfies the part bounds {:?}",
                self.bounds
            ));
        }
        Ok(table)
    }

    pub(crate) fn check(&self, v: &[u64]) -> Result<(), String> {
        let t = self.table.as_ref().map_err(Clone::clone)?;
        if v.len() != self.parts {
            return Err(format!("expected {} factors, got {v:?}", self.parts));
        }
        let mut product: u64 = 1;
        for &f in v {
            product = product
                .checked_mul(f)
                .ok_or_else(|| format!("the product of {v:?} overflows"))?;
        }
        if product != self.n {
            return Err(format!(
                "the factors {v:?} multiply to {product}, not to the extent {}",
                self.n
            ));
        }
        if !t.in_bounds(v) {
            return Err(format!("{v:?} breaks the part bounds {:?}", self.bounds));
        }
        Ok(())
    }

    /// A factorization drawn uniformly among all those within the bounds: part by part,
    /// each factor is chosen with probability proportional to the number of ways to
    /// finish the split.
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<u64> {
        let Ok(t) = &self.table else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(self.parts);
        let mut rest = self.n;
        for k in 0..self.parts - 1 {
            let total = t.count(k, rest);
            let mut chosen = rest;
            if total > 0 {
                let mut r = rng.gen_range(0..total);
                for &d in t.divisors.iter().take_while(|&&d| d <= rest) {
                    if !rest.is_multiple_of(d) || d > t.max[k] {
                        continue;
                    }
                    let w = t.count(k + 1, rest / d);
                    if r < w {
                        chosen = d;
                        break;
                    }
                    r -= w;
                }
            }
            out.push(chosen);
            rest /= chosen;
        }
        out.push(rest);
        out
    }

    /// Every factorization within the bounds, in ascending (lexicographic) order.
    pub(crate) fn enumerate(&self) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        if let Ok(t) = &self.table {
            let mut prefix = Vec::with_capacity(self.parts);
            t.enumerate_from(0, self.n, &mut prefix, &mut out);
        }
        out
    }

    /// Moves of one prime factor from one part to another, within the bounds.
    pub(crate) fn neighbors(&self, v: &[u64]) -> Vec<Vec<u64>> {
        match &self.table {
            Ok(t) => t.moves(v).into_iter().filter(|w| t.in_bounds(w)).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Per prime, the fewest single-factor moves: half the L1 distance between the two
    /// exponent vectors. Bounds are ignored (this is the topology's metric).
    pub(crate) fn distance(&self, a: &[u64], b: &[u64]) -> u64 {
        let Ok(t) = &self.table else {
            return 0;
        };
        let mut total = 0;
        for &p in &t.primes {
            let diff: u64 = a
                .iter()
                .zip(b)
                .map(|(&x, &y)| u64::from(exponent(x, p).abs_diff(exponent(y, p))))
                .sum();
            total += diff / 2;
        }
        total
    }

    /// Values within `radius` hops; the walk may pass through values outside the bounds,
    /// so the result is exactly the in-bounds part of the metric ball.
    pub(crate) fn ball(&self, v: &[u64], radius: u32) -> Vec<(Vec<u64>, u32)> {
        let Ok(t) = &self.table else {
            return vec![(v.to_vec(), 0)];
        };
        bfs_ball(v.to_vec(), radius, |w| t.moves(w))
            .into_iter()
            .filter(|(w, _)| t.in_bounds(w))
            .collect()
    }

    /// `log2` of every part.
    pub(crate) fn features(&self, v: &[u64], out: &mut Vec<f64>) {
        out.extend(v.iter().map(|&f| (f as f64).log2()));
    }

    pub(crate) fn feature_names(&self, name: &str, out: &mut Vec<String>) {
        out.extend((0..self.parts).map(|i| format!("{name}[{i}].log2")));
    }
}

impl Table {
    /// `counts[k]` at divisor `m` (0 if `m` does not divide the extent).
    fn count(&self, k: usize, m: u64) -> u128 {
        match (self.counts.get(k), self.divisors.binary_search(&m)) {
            (Some(row), Ok(i)) => row.get(i).copied().unwrap_or(0),
            _ => 0,
        }
    }

    fn in_bounds(&self, v: &[u64]) -> bool {
        v.iter().zip(&self.max).all(|(f, m)| f <= m)
    }

    /// Every single-prime move, ignoring bounds. Distinct moves give distinct values.
    fn moves(&self, v: &[u64]) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        for (i, &from) in v.iter().enumerate() {
            for &p in &self.primes {
                if from % p != 0 {
                    continue;
                }
                for j in (0..v.len()).filter(|&j| j != i) {
                    let mut w = v.to_vec();
                    w[i] /= p;
                    w[j] *= p;
                    out.push(w);
                }
            }
        }
        out
    }

    fn enumerate_from(&self, k: usize, rest: u64, prefix: &mut Vec<u64>, out: &mut Vec<Vec<u64>>) {
        if k + 1 == self.max.len() {
            if self.count(k, rest) > 0 {
                prefix.push(rest);
                out.push(prefix.clone());
                prefix.pop();
            }
            return;
        }
        for &d in self.divisors.iter().take_while(|&&d| d <= rest) {
            if !rest.is_multiple_of(d) || d > self.max[k] || self.count(k + 1, rest / d) == 0 {
                continue;
            }
            prefix.push(d);
            self.enumerate_from(k + 1, rest / d, prefix, out);
            prefix.pop();
        }
    }
}

/// The exponent of prime `p` in `x`.
fn exponent(mut x: u64, p: u64) -> u32 {
    let mut e = 0;
    while x > 0 && x.is_multiple_of(p) {
        x /= p;
        e += 1;
    }
    e
}

/// `(prime, exponent)` pairs of `n >= 1`, ascending, by trial division (n <= 2^32).
fn prime_factors(mut n: u64) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    let mut p = 2;
    while p * p <= n {
        if n.is_multiple_of(p) {
            let mut e = 0;
            while n.is_multiple_of(p) {
                n /= p;
                e += 1;
            }
            out.push((p, e));
        }
        p += if p == 2 { 1 } else { 2 };
    }
    if n > 1 {
        out.push((n, 1));
    }
    out
}

/// Every divisor of the number with these prime factors, ascending.
fn divisors(factors: &[(u64, u32)]) -> Vec<u64> {
    let mut out = vec![1u64];
    for &(p, e) in factors {
        let mut next = Vec::with_capacity(out.len() * (e as usize + 1));
        for &d in &out {
            let mut x = d;
            for _ in 0..=e {
                next.push(x);
                x = x.saturating_mul(p);
            }
        }
        out = next;
    }
    out.sort_unstable();
    out
}

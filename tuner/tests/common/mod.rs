//! Synthetic landscapes over realistic spaces, shared by the strategy tests and the
//! comparison benchmark.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use tuner::{Config, SearchSpace, SyntheticMeasurer};

/// The true seconds of a config (`None`: it fails).
pub type TimeFn = Rc<dyn Fn(&Config) -> Option<f64>>;

/// A landscape: a space, the true seconds of each config (`None`: it fails), and the
/// optimum's seconds (or a lower bound of it).
#[derive(Clone)]
pub struct Landscape {
    pub name: &'static str,
    pub space: SearchSpace,
    pub time: TimeFn,
    pub optimum: f64,
}

impl Landscape {
    pub fn measurer(&self) -> SyntheticMeasurer {
        let f = self.time.clone();
        SyntheticMeasurer::new(move |c| f(c))
    }

    pub fn noisy_measurer(&self, noise: f64, seed: u64) -> SyntheticMeasurer {
        self.measurer().with_noise(noise, seed)
    }

    /// The seconds a config must reach to be within 95% of the optimum's throughput.
    pub fn target(&self) -> f64 {
        self.optimum / 0.95
    }

    pub fn features(&self) -> impl Fn(&Config) -> Vec<f64> + '_ {
        move |c| self.space.to_features(c).unwrap_or_default()
    }
}

/// A deterministic value in [0, 1) from a config (the landscape's small ruggedness).
pub fn jitter(c: &Config) -> f64 {
    let mut h = DefaultHasher::new();
    c.hash(&mut h);
    (h.finish() % 10_000) as f64 / 10_000.0
}

fn log2(x: u64) -> f64 {
    (x as f64).log2()
}

/// How far `x` lies outside `[lo, hi]`.
fn outside(x: f64, lo: f64, hi: f64) -> f64 {
    if x < lo {
        lo - x
    } else if x > hi {
        x - hi
    } else {
        0.0
    }
}

/// A GPU SIMT matmul template for 512×512×512: two 5-level spatial splits (block,
/// virtual thread, thread, two register levels), a 3-level reduction split, an unroll
/// list and a permutation of the four register-level loops. Constraints, as the real
/// template has them: threads ≤ 1024, shared memory ≤ 48 KiB, at most 128 accumulators.
pub fn gpu_space() -> SearchSpace {
    let mut b = SearchSpace::builder();
    let i = b.factorization("tile_i", 512, 5);
    let j = b.factorization("tile_j", 512, 5);
    let k = b.factorization("tile_k", 512, 3);
    b.discrete("unroll", &[0, 16, 64, 512]);
    b.permutation("order", 4);
    b.constraint("threads <= 1024", move |c| {
        match (c.factors(i), c.factors(j)) {
            (Some(fi), Some(fj)) => fi[2] * fj[2] <= 1024,
            _ => false,
        }
    });
    b.constraint("shared memory <= 48 KiB", move |c| {
        match (c.factors(i), c.factors(j), c.factors(k)) {
            (Some(fi), Some(fj), Some(fk)) => {
                let bi: u64 = fi[1..].iter().product();
                let bj: u64 = fj[1..].iter().product();
                let bk: u64 = fk[1..].iter().product();
                (bi + bj) * bk * 4 <= 48 * 1024
            }
            _ => false,
        }
    });
    b.constraint("accumulators <= 128", move |c| {
        match (c.factors(i), c.factors(j)) {
            (Some(fi), Some(fj)) => fi[3] * fi[4] * fj[3] * fj[4] <= 128,
            _ => false,
        }
    });
    b.build().unwrap()
}

/// Seconds of the GPU template: the product of saturating efficiency terms (each 1 on a
/// plateau, decaying per octave outside it), a 2% hash ruggedness, and an invalid region
/// the constraints do not know (unroll 512 with 64+ accumulators "fails in ptxas"). The
/// optimum is 1 ms: every term on its plateau and no ruggedness (the best config reaches
/// at least 0.98 of it, e.g. `[16,1,16,2,2]`, `[16,1,16,2,2]`, `[32,4,4]`, 64, identity).
pub fn gpu_landscape() -> Landscape {
    let space = gpu_space();
    let time = move |c: &Config| -> Option<f64> {
        let fi = c.factors(0)?;
        let fj = c.factors(1)?;
        let fk = c.factors(2)?;
        let unroll = c.index(3)?;
        let order = c.permutation(4)?;
        let regs = fi[3] * fi[4] * fj[3] * fj[4];
        if unroll == 3 && regs >= 64 {
            return None;
        }
        let mut penalty = 0.0;
        penalty += 0.30 * outside(log2(fi[2] * fj[2]), 7.0, 8.0); // threads 128..256
        penalty += 0.25 * outside(log2(fi[3] * fi[4]), 2.0, 3.0); // register tile i
        penalty += 0.25 * outside(log2(fj[3] * fj[4]), 2.0, 3.0); // register tile j
        penalty += 0.10 * outside(log2(fi[1]), 0.0, 1.0); // virtual threads
        penalty += 0.10 * outside(log2(fj[1]), 0.0, 1.0);
        penalty += 0.10 * outside(log2(fj[4]), 1.0, 2.0); // vector width on j
        penalty += 0.15 * outside(log2(fk[2]), 0.0, 2.0); // inner k
        penalty += 0.15 * outside(log2(fk[1]), 2.0, 4.0); // shared-memory k step
        penalty += 0.20 * outside(log2(fi[0] * fj[0]), 5.0, 18.0); // enough blocks
        penalty += 0.10 * outside(unroll as f64, 2.0, 2.0); // unroll 64
        if order[3] != 3 {
            penalty += 0.12; // reduction loop innermost
        }
        if order[0] != 0 {
            penalty += 0.06;
        }
        let scale: f64 = std::env::var("PSCALE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1.0);
        let perf = (-penalty * scale).exp() * (1.0 - 0.02 * jitter(c));
        Some(1e-3 / perf)
    };
    Landscape {
        name: "gpu-matmul",
        space,
        time: Rc::new(time),
        optimum: 1e-3,
    }
}

/// A CPU template (enumerable, 56 448 points): a 3-level split of 64, a 2-level split of
/// the reduction, vector ISA and parallel-loop choices, unroll, loop order.
pub fn cpu_space() -> SearchSpace {
    let mut b = SearchSpace::builder();
    b.factorization("tile_i", 64, 3);
    b.factorization("tile_k", 64, 2);
    b.categorical("vec", &["scalar", "sse", "avx2", "avx512"]);
    b.categorical("parallel", &["none", "outer", "inner"]);
    b.discrete("unroll", &[1, 2, 4, 8]);
    b.permutation("order", 3);
    b.build().unwrap()
}

/// Seconds of the CPU template: categorical effects with interactions (a vector ISA needs
/// an inner tile of at least its lanes), a 4% hash ruggedness, and an invalid region
/// (avx512 with unroll 8 "fails to compile"). Its optimum is found by enumeration.
pub fn cpu_landscape() -> Landscape {
    let space = cpu_space();
    let time = move |c: &Config| -> Option<f64> {
        let ti = c.factors(0)?;
        let tk = c.factors(1)?;
        let vec = c.index(2)?;
        let par = c.index(3)?;
        let unroll = c.index(4)?;
        let order = c.permutation(5)?;
        if vec == 3 && unroll == 3 {
            return None;
        }
        let lanes = [1u64, 4, 8, 16][vec];
        let isa = [0.3, 0.6, 1.0, 0.93][vec];
        let fill = (ti[2] as f64 / lanes as f64).min(1.0);
        let mut perf = isa * (0.4 + 0.6 * fill);
        perf *= [0.25, 1.0, 0.55][par];
        if par == 1 && ti[0] < 2 {
            perf *= 0.5; // nothing to share between cores
        }
        perf *= (-0.15 * outside(log2(tk[1]), 2.0, 4.0)).exp();
        perf *= (-0.1 * outside(unroll as f64, 2.0, 2.0)).exp();
        perf *= (-0.12 * outside(log2(ti[1]), 1.0, 2.0)).exp();
        if order[2] != 1 {
            perf *= 0.85;
        }
        perf *= 1.0 - 0.04 * jitter(c);
        Some(1e-4 / perf)
    };
    let best = space
        .enumerate(100_000)
        .unwrap()
        .iter()
        .filter_map(&time)
        .fold(f64::INFINITY, f64::min);
    Landscape {
        name: "cpu-categorical",
        space,
        time: Rc::new(time),
        optimum: best,
    }
}

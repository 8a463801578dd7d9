//! Measurers that need no hardware: [`ReplayMeasurer`] answers from recorded measurements
//! (landscapes measured on a real GPU, replayed offline to compare strategies), and
//! [`SyntheticMeasurer`] times a configuration with a function (tests and benchmarks).
//!
//! ```
//! use tuner::{Config, Measurer, Outcome, ReplayMeasurer, Value};
//!
//! let fast = Config::new(vec![Value::Discrete(0)]);
//! let slow = Config::new(vec![Value::Discrete(1)]);
//! let mut m = ReplayMeasurer::new(vec![
//!     (fast.clone(), Outcome::Valid { samples: vec![1.0, 1.1, 0.9] }),
//!     (slow.clone(), Outcome::Valid { samples: vec![2.0] }),
//! ])
//! .with_resampling(7);
//! assert_eq!(m.measure(&[fast.clone()])[0].seconds(), Some(1.0));
//! assert!(matches!(m.measure(&[Config::new(vec![Value::Discrete(2)])])[0], Outcome::Invalid { .. }));
//! // A remeasure draws the recorded samples again, with replacement.
//! let again = m.remeasure(&fast);
//! assert!(again.seconds().is_some_and(|s| (0.9..=1.1).contains(&s)));
//! assert_eq!(m.best().map(|(_, s)| s), Some(1.0));
//! ```

use std::collections::HashMap;
use std::fmt;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::measure::{Measurer, Outcome};
use crate::Config;

/// The reason given for a configuration that the landscape does not hold.
pub const NOT_RECORDED: &str = "not recorded";

/// Answers from a recorded landscape (config → outcome). A config that is not in it is
/// [`Outcome::Invalid`] with reason [`NOT_RECORDED`]. Several records of one config are
/// merged: their samples pooled (an invalid record counts only when none is valid).
///
/// `measure` returns the recorded outcome as it is. With [`with_resampling`](Self::with_resampling),
/// `remeasure` draws as many samples as were recorded, with replacement, from the recorded
/// ones (seeded), so a strategy that asks again sees plausible measurement noise.
#[derive(Debug, Clone)]
pub struct ReplayMeasurer {
    landscape: HashMap<Config, Outcome>,
    resample: Option<StdRng>,
    measured: usize,
}

impl ReplayMeasurer {
    /// A replay of `landscape` (a `HashMap`, a `Vec` of pairs, or any iterator of them).
    pub fn new(landscape: impl IntoIterator<Item = (Config, Outcome)>) -> Self {
        let mut map: HashMap<Config, Outcome> = HashMap::new();
        for (config, outcome) in landscape {
            let merged = match (map.remove(&config), outcome) {
                (None, o) => o,
                (Some(Outcome::Valid { mut samples }), Outcome::Valid { samples: more }) => {
                    samples.extend(more);
                    Outcome::Valid { samples }
                }
                (Some(v @ Outcome::Valid { .. }), Outcome::Invalid { .. }) => v,
                (Some(Outcome::Invalid { .. }), o) => o,
            };
            map.insert(config, merged);
        }
        ReplayMeasurer {
            landscape: map,
            resample: None,
            measured: 0,
        }
    }

    /// Remeasures resample the recorded samples with an RNG seeded by `seed`.
    pub fn with_resampling(mut self, seed: u64) -> Self {
        self.resample = Some(StdRng::seed_from_u64(seed));
        self
    }

    /// The number of recorded configurations.
    pub fn len(&self) -> usize {
        self.landscape.len()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.landscape.is_empty()
    }

    /// How many configurations were measured (remeasures included).
    pub fn measured(&self) -> usize {
        self.measured
    }

    /// The recorded outcome of `config`.
    pub fn get(&self, config: &Config) -> Option<&Outcome> {
        self.landscape.get(config)
    }

    /// The fastest recorded configuration and its median seconds (ties: the smallest
    /// config), the optimum a replayed search is judged against.
    pub fn best(&self) -> Option<(&Config, f64)> {
        let mut best: Option<(&Config, f64)> = None;
        for (c, o) in &self.landscape {
            if let Some(s) = o.seconds() {
                let better = match best {
                    None => true,
                    Some((bc, bs)) => s < bs || (s == bs && c < bc),
                };
                if better {
                    best = Some((c, s));
                }
            }
        }
        best
    }

    fn lookup(&self, config: &Config) -> Outcome {
        self.landscape
            .get(config)
            .cloned()
            .unwrap_or_else(|| Outcome::Invalid {
                reason: NOT_RECORDED.into(),
            })
    }
}

impl Measurer for ReplayMeasurer {
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        self.measured += batch.len();
        batch.iter().map(|c| self.lookup(c)).collect()
    }

    fn remeasure(&mut self, config: &Config) -> Outcome {
        self.measured += 1;
        let outcome = self.lookup(config);
        match (&mut self.resample, outcome) {
            (Some(rng), Outcome::Valid { samples }) if !samples.is_empty() => {
                let drawn = (0..samples.len())
                    .map(|_| samples[rng.gen_range(0..samples.len())])
                    .collect();
                Outcome::Valid { samples: drawn }
            }
            (_, o) => o,
        }
    }
}

/// The function a [`SyntheticMeasurer`] times with: the true seconds of a config, or
/// `None` for a config that "fails" (an invalid region).
pub type TimeFn = Box<dyn Fn(&Config) -> Option<f64>>;

/// Times configurations with a function: `samples` (3) samples per measurement, each the
/// true time multiplied by `exp(noise · z)` with `z` standard normal from a seeded RNG
/// (no noise by default). `None` from the function is an invalid outcome.
pub struct SyntheticMeasurer {
    time: TimeFn,
    noise: f64,
    samples: usize,
    rng: StdRng,
    measured: usize,
}

impl fmt::Debug for SyntheticMeasurer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyntheticMeasurer")
            .field("noise", &self.noise)
            .field("samples", &self.samples)
            .field("measured", &self.measured)
            .finish_non_exhaustive()
    }
}

impl SyntheticMeasurer {
    /// A noise-free measurer timing with `time`.
    pub fn new(time: impl Fn(&Config) -> Option<f64> + 'static) -> Self {
        SyntheticMeasurer {
            time: Box::new(time),
            noise: 0.0,
            samples: 3,
            rng: StdRng::seed_from_u64(0),
            measured: 0,
        }
    }

    /// Multiplicative log-normal noise of relative size `noise` (e.g. 0.02), seeded.
    pub fn with_noise(mut self, noise: f64, seed: u64) -> Self {
        self.noise = noise.max(0.0);
        self.rng = StdRng::seed_from_u64(seed);
        self
    }

    /// Samples per measurement (at least 1).
    pub fn with_samples(mut self, samples: usize) -> Self {
        self.samples = samples.max(1);
        self
    }

    /// How many configurations were measured (remeasures included).
    pub fn measured(&self) -> usize {
        self.measured
    }

    /// The noise-free time of `config`.
    pub fn true_time(&self, config: &Config) -> Option<f64> {
        (self.time)(config)
    }

    fn one(&mut self, config: &Config) -> Outcome {
        self.measured += 1;
        match (self.time)(config) {
            Some(t) if t.is_finite() && t > 0.0 => {
                let samples = (0..self.samples)
                    .map(|_| {
                        if self.noise > 0.0 {
                            t * (self.noise * standard_normal(&mut self.rng)).exp()
                        } else {
                            t
                        }
                    })
                    .collect();
                Outcome::Valid { samples }
            }
            _ => Outcome::Invalid {
                reason: "synthetic invalid region".into(),
            },
        }
    }
}

impl Measurer for SyntheticMeasurer {
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        batch.iter().map(|c| self.one(c)).collect()
    }

    fn remeasure(&mut self, config: &Config) -> Outcome {
        self.one(config)
    }
}

/// A standard normal draw (Box–Muller).
fn standard_normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = rng.gen::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

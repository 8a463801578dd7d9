//! Generic auto-tuning: search spaces of knobs, search strategies, cost models, the
//! measurement protocol and the tuning loop. It knows nothing about tensors: it searches
//! any space whose points a measurer can time.
//!
//! - [`SearchSpace`] (below): the points and their topology.
//! - [`strategy`]: random, Ansor's evolutionary search, OpEvo, dynamic gradient descent,
//!   Droplet Search and explore-then-exploit ([`by_name`], [`DEFAULT_STRATEGY`]).
//! - [`cost_model`]: the learned [`Forest`] (warm-startable) and [`pairwise_accuracy`].
//! - [`measure`]: the [`Measurer`] protocol; [`replay`]: measurers without hardware.
//! - [`tune()`](tune()): the loop that ties them together under a [`Budget`].
//!
//! A [`SearchSpace`] is a list of named knobs of four kinds — [`Factorization`] (ordered
//! factors of an extent: tile sizes), [`Permutation`] (loop order), [`Discrete`] (an
//! ordered list of integers: unroll depth) and [`Categorical`] (named choices: vector
//! type) — plus named constraints over whole configs. The knobs carry OpEvo's topology
//! (moving one prime factor, swapping two positions, an adjacent value, another choice), so
//! the space offers what search strategies need: uniform sampling, neighbours (all, per
//! knob, within n hops), the hop distance, the q-random-walk mutation, enumeration of small
//! spaces and a feature vector for cost models. A [`Config`] is one point: one [`Value`]
//! per knob, hashable and ordered, with a stable [text form](crate::text).
//!
//! ```
//! use rand::{rngs::StdRng, SeedableRng};
//! use tuner::{Factorization, SearchSpace};
//!
//! # fn main() -> Result<(), tuner::Error> {
//! let mut b = SearchSpace::builder();
//! let tile = b.add("tile_i", Factorization::new(64, 3).with_max_innermost(8));
//! let order = b.permutation("order", 3);
//! let unroll = b.discrete("unroll", &[0, 16, 64, 512]);
//! b.categorical("vec", &["f32", "f32x4", "f32x8"]);
//! b.constraint("outer tile <= 16", move |c| c.factors(tile).is_some_and(|f| f[0] <= 16));
//! let space = b.build()?;
//!
//! let mut rng = StdRng::seed_from_u64(7);
//! let parent = space.sample_uniform(&mut rng)?;
//! let child = space.mutate_q_random_walk(&parent, 0.5, &mut rng)?;
//! assert!(space.is_valid(&child) && child != parent);
//! assert!(space.hop_distance(&parent, &child)? >= 1);
//!
//! let text = space.format(&child)?; // e.g. "tile_i=[8,4,2];order=[1,0,2];unroll=64;vec=f32x8"
//! println!("{text}");
//! assert_eq!(space.parse(&text)?, child);
//! assert_eq!(child.permutation(order).map(<[usize]>::len), Some(3));
//! assert!(space.discrete_value(&child, unroll).is_some());
//! # Ok(())
//! # }
//! ```

mod config;
pub mod cost_model;
mod error;
mod knob;
pub mod measure;
#[cfg(feature = "plot")]
pub mod plot;
pub mod replay;
mod space;
pub mod strategy;
pub mod text;
pub mod tune;

pub use config::{Config, Value};
pub use cost_model::{pairwise_accuracy, CostModel, Forest, Untrained};
pub use error::{Error, Result};
pub use knob::{Categorical, Discrete, Factorization, Knob, Permutation};
pub use measure::{Measurer, Outcome, Trial};
pub use replay::{ReplayMeasurer, SyntheticMeasurer};
pub use space::{Constraint, SearchSpace, SearchSpaceBuilder, DEFAULT_MAX_TRIES};
pub use strategy::{by_name, Context, SearchStrategy, DEFAULT_STRATEGY};
pub use tune::{confirm, judge, paired_best, tune, Budget, StopReason, TuneResult};

//! [`SearchSpace`]: named knobs plus constraints, and the operations search strategies use
//! on it — uniform sampling, neighbours and hop distance in the OpEvo topology, the
//! q-random-walk mutation, enumeration, and feature vectors for cost models.
//!
//! A config is *valid* when every value fits its knob (right kind, product equals the
//! extent, within the part bounds, a true permutation, index in range) and every
//! constraint holds. Every operation that returns configs returns valid ones only.
//!
//! The hop distance is the metric of the knobs' topology and ignores the constraints and
//! the part bounds: it counts moves, not the valid points on the way. Neighbour sets are
//! the valid configs at that distance, so every neighbour is exactly 1 hop away and every
//! n-hop neighbour at most n.

use std::fmt;
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::Rng;

use crate::config::{Config, Value};
use crate::error::{Error, Result};
use crate::knob::{check_name, Categorical, Discrete, Factorization, Knob, Permutation};

/// How many configs [`SearchSpace::sample_uniform`] draws before giving up, and how many
/// walks [`SearchSpace::mutate_q_random_walk`] tries, unless the builder says otherwise.
pub const DEFAULT_MAX_TRIES: usize = 10_000;

/// The longest single q-random walk, in steps (reached only when q is close to 1).
const MAX_WALK_STEPS: usize = 1_000;

/// A named predicate over whole configs, e.g. "threads per block ≤ 1024". It only ever sees
/// configs whose values fit their knobs.
#[derive(Clone)]
pub struct Constraint {
    name: String,
    check: Arc<dyn Fn(&Config) -> bool + Send + Sync>,
}

impl Constraint {
    /// The name given to the builder; errors and rejections report it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `config` satisfies the constraint.
    pub fn holds(&self, config: &Config) -> bool {
        (self.check)(config)
    }
}

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Constraint")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct NamedKnob {
    name: String,
    knob: Knob,
}

/// A search space: an ordered list of named [`Knob`]s and a list of named [`Constraint`]s.
/// Build one with [`SearchSpace::builder`]. See the [crate docs](crate) for an example.
#[derive(Debug, Clone)]
pub struct SearchSpace {
    knobs: Vec<NamedKnob>,
    constraints: Vec<Constraint>,
    max_tries: usize,
}

/// Collects knobs and constraints; [`SearchSpaceBuilder::build`] checks them. Each knob
/// method returns the knob's index, for use in constraints and with [`Config::value`].
#[derive(Debug)]
pub struct SearchSpaceBuilder {
    knobs: Vec<NamedKnob>,
    constraints: Vec<Constraint>,
    max_tries: usize,
    error: Option<Error>,
}

impl Default for SearchSpaceBuilder {
    fn default() -> Self {
        SearchSpaceBuilder {
            knobs: Vec::new(),
            constraints: Vec::new(),
            max_tries: DEFAULT_MAX_TRIES,
            error: None,
        }
    }
}

impl SearchSpaceBuilder {
    /// Adds a knob and returns its index. Names use ASCII letters, digits and `_ . - +` and
    /// must be unique; a bad name or knob is reported by [`build`](Self::build).
    pub fn add(&mut self, name: &str, knob: impl Into<Knob>) -> usize {
        let knob = knob.into();
        let index = self.knobs.len();
        if self.error.is_none() {
            if let Err(reason) = check_name(name).and_then(|()| knob.validate()) {
                self.error = Some(Error::InvalidKnob {
                    knob: name.to_string(),
                    reason,
                });
            } else if self.knobs.iter().any(|k| k.name == name) {
                self.error = Some(Error::DuplicateKnob(name.to_string()));
            }
        }
        self.knobs.push(NamedKnob {
            name: name.to_string(),
            knob,
        });
        index
    }

    /// Adds `n` split into `parts` ordered factors (see [`Factorization`] for bounds).
    pub fn factorization(&mut self, name: &str, n: u64, parts: usize) -> usize {
        self.add(name, Factorization::new(n, parts))
    }

    /// Adds an order of `n` items.
    pub fn permutation(&mut self, name: &str, n: usize) -> usize {
        self.add(name, Permutation::new(n))
    }

    /// Adds an ordered list of distinct integers; the value is an index into it.
    pub fn discrete(&mut self, name: &str, values: &[i64]) -> usize {
        self.add(name, Discrete::new(values))
    }

    /// Adds an unordered list of distinct named choices.
    pub fn categorical(&mut self, name: &str, choices: &[&str]) -> usize {
        self.add(name, Categorical::new(choices.iter().copied()))
    }

    /// Adds a constraint. Its name (any non-empty text, unique) is what rejections report.
    pub fn constraint<F>(&mut self, name: &str, check: F) -> &mut Self
    where
        F: Fn(&Config) -> bool + Send + Sync + 'static,
    {
        if self.error.is_none() {
            let reason = if name.trim().is_empty() {
                Some("the name is empty")
            } else if self.constraints.iter().any(|c| c.name == name) {
                Some("the name is used twice")
            } else {
                None
            };
            if let Some(reason) = reason {
                self.error = Some(Error::InvalidConstraint {
                    name: name.to_string(),
                    reason: reason.to_string(),
                });
            }
        }
        self.constraints.push(Constraint {
            name: name.to_string(),
            check: Arc::new(check),
        });
        self
    }

    /// How many tries rejection sampling and mutation make before reporting failure
    /// (default [`DEFAULT_MAX_TRIES`]; at least 1).
    pub fn max_tries(&mut self, tries: usize) -> &mut Self {
        self.max_tries = tries.max(1);
        self
    }

    /// The space, or the first problem found with a knob or constraint.
    pub fn build(self) -> Result<SearchSpace> {
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok(SearchSpace {
            knobs: self.knobs,
            constraints: self.constraints,
            max_tries: self.max_tries,
        })
    }
}

impl SearchSpace {
    /// An empty builder.
    pub fn builder() -> SearchSpaceBuilder {
        SearchSpaceBuilder::default()
    }

    // ----- structure -------------------------------------------------------------------

    /// The number of knobs.
    pub fn knob_count(&self) -> usize {
        self.knobs.len()
    }

    /// Knob `index`.
    pub fn knob(&self, index: usize) -> Option<&Knob> {
        self.knobs.get(index).map(|k| &k.knob)
    }

    /// The name of knob `index`.
    pub fn knob_name(&self, index: usize) -> Option<&str> {
        self.knobs.get(index).map(|k| k.name.as_str())
    }

    /// The index of the knob called `name`.
    pub fn knob_index(&self, name: &str) -> Option<usize> {
        self.knobs.iter().position(|k| k.name == name)
    }

    /// The constraints, in the order they were added.
    pub fn constraints(&self) -> &[Constraint] {
        &self.constraints
    }

    /// The integer a discrete knob takes in `config` (the config holds its index).
    pub fn discrete_value(&self, config: &Config, knob: usize) -> Option<i64> {
        match (self.knob(knob)?, config.value(knob)?) {
            (Knob::Discrete(k), Value::Discrete(i)) => k.get(*i),
            _ => None,
        }
    }

    /// The name of the choice a categorical knob takes in `config`.
    pub fn choice(&self, config: &Config, knob: usize) -> Option<&str> {
        match (self.knob(knob)?, config.value(knob)?) {
            (Knob::Categorical(k), Value::Categorical(i)) => k.get(*i),
            _ => None,
        }
    }

    /// The number of points, ignoring constraints (the product of the knobs' sizes, part
    /// bounds included), saturating at `u128::MAX`.
    pub fn size(&self) -> u128 {
        self.knobs
            .iter()
            .fold(1u128, |acc, k| acc.saturating_mul(k.knob.size()))
    }

    // ----- validity --------------------------------------------------------------------

    /// Whether `config` is valid: every value fits its knob and every constraint holds.
    /// The error names the knob or the constraint.
    pub fn check(&self, config: &Config) -> Result<()> {
        self.check_shape(config)?;
        match self.violated(config) {
            Some(i) => Err(Error::ConstraintViolated(self.constraints[i].name.clone())),
            None => Ok(()),
        }
    }

    /// Whether `config` is valid.
    pub fn is_valid(&self, config: &Config) -> bool {
        self.check(config).is_ok()
    }

    /// Checks that every value fits its knob (constraints not consulted).
    fn check_shape(&self, config: &Config) -> Result<()> {
        if config.len() != self.knobs.len() {
            return Err(Error::WrongKnobCount {
                expected: self.knobs.len(),
                found: config.len(),
            });
        }
        for (k, v) in self.knobs.iter().zip(config.values()) {
            k.knob.check(v).map_err(|reason| Error::InvalidValue {
                knob: k.name.clone(),
                reason,
            })?;
        }
        Ok(())
    }

    /// The index of the first constraint that rejects a shape-checked config.
    fn violated(&self, config: &Config) -> Option<usize> {
        self.constraints.iter().position(|c| !c.holds(config))
    }

    fn satisfies(&self, config: &Config) -> bool {
        self.violated(config).is_none()
    }

    fn knob_at(&self, index: usize) -> Result<&NamedKnob> {
        self.knobs.get(index).ok_or(Error::KnobIndex {
            index,
            count: self.knobs.len(),
        })
    }

    // ----- sampling --------------------------------------------------------------------

    /// A config drawn uniformly among the valid ones: each knob uniformly (a factorization
    /// uniformly among all its ordered factorizations), rejected and redrawn while a
    /// constraint fails, at most `max_tries` times.
    ///
    /// # Errors
    /// [`Error::Unsatisfiable`], naming the constraint that rejected the most draws.
    pub fn sample_uniform<R: Rng + ?Sized>(&self, rng: &mut R) -> Result<Config> {
        let mut rejections = vec![0usize; self.constraints.len()];
        for _ in 0..self.max_tries {
            let config = self.sample_ignoring_constraints(rng);
            match self.violated(&config) {
                None => return Ok(config),
                Some(i) => rejections[i] += 1,
            }
        }
        let worst = rejections
            .iter()
            .enumerate()
            .max_by_key(|&(_, n)| *n)
            .and_then(|(i, _)| self.constraints.get(i))
            .map(|c| c.name.clone())
            .unwrap_or_default();
        Err(Error::Unsatisfiable {
            tries: self.max_tries,
            constraint: worst,
        })
    }

    fn sample_ignoring_constraints<R: Rng + ?Sized>(&self, rng: &mut R) -> Config {
        Config::new(self.knobs.iter().map(|k| k.knob.sample(rng)).collect())
    }

    /// OpEvo's q-random-walk mutation: from `config`, step to a uniformly chosen neighbour
    /// along a uniformly chosen knob (among knobs that have a neighbour), then keep walking
    /// with probability `q` (OpEvo uses 0.5). The walk may pass through configs that break a
    /// constraint; its end must be valid and differ from `config`, else the walk is redrawn
    /// (at most `max_tries` times), then a valid neighbour is taken, then a uniform sample.
    ///
    /// # Errors
    /// [`Error::InvalidProbability`] unless `0 <= q < 1`; the errors of [`check`](Self::check)
    /// for a shape that does not fit (constraints are not required of `config`);
    /// [`Error::NoMutation`] when no other valid config was found.
    pub fn mutate_q_random_walk<R: Rng + ?Sized>(
        &self,
        config: &Config,
        q: f64,
        rng: &mut R,
    ) -> Result<Config> {
        if !(0.0..1.0).contains(&q) {
            return Err(Error::InvalidProbability(q));
        }
        self.check_shape(config)?;
        let mut order: Vec<usize> = (0..self.knobs.len()).collect();
        for _ in 0..self.max_tries {
            let mut values = config.values().to_vec();
            for _ in 0..MAX_WALK_STEPS {
                order.shuffle(rng);
                let mut stepped = false;
                for &k in &order {
                    let here = &values[k];
                    if let Some(next) = self.knobs[k].knob.neighbors(here).choose(rng) {
                        values[k] = next.clone();
                        stepped = true;
                        break;
                    }
                }
                if !stepped || !rng.gen_bool(q) {
                    break;
                }
            }
            let end = Config::new(values);
            if end != *config && self.satisfies(&end) {
                return Ok(end);
            }
        }
        if let Some(next) = self.neighbors(config)?.choose(rng) {
            return Ok(next.clone());
        }
        for _ in 0..self.max_tries {
            let other = self.sample_ignoring_constraints(rng);
            if other != *config && self.satisfies(&other) {
                return Ok(other);
            }
        }
        Err(Error::NoMutation)
    }

    // ----- topology --------------------------------------------------------------------

    /// The valid configs one hop from `config` along knob `knob` (the others unchanged):
    /// what coordinate descent tries.
    pub fn knob_neighbors(&self, config: &Config, knob: usize) -> Result<Vec<Config>> {
        self.check_shape(config)?;
        let k = self.knob_at(knob)?;
        let mut out = Vec::new();
        let mut values = config.values().to_vec();
        for next in k.knob.neighbors(&config.values()[knob]) {
            values[knob] = next;
            let candidate = Config::new(values.clone());
            if self.satisfies(&candidate) {
                out.push(candidate);
            }
        }
        Ok(out)
    }

    /// The valid configs one hop from `config`: every knob's neighbours, knob by knob.
    pub fn neighbors(&self, config: &Config) -> Result<Vec<Config>> {
        let mut out = Vec::new();
        for knob in 0..self.knobs.len() {
            out.extend(self.knob_neighbors(config, knob)?);
        }
        Ok(out)
    }

    /// The valid configs `c` with `1 <= hop_distance(config, c) <= n`, each once, in a
    /// deterministic order. Their number grows quickly with `n` (a few hundred 1-hop
    /// neighbours give tens of thousands at 2 hops).
    pub fn n_hop_neighbors(&self, config: &Config, n: u32) -> Result<Vec<Config>> {
        self.check_shape(config)?;
        let balls: Vec<Vec<(Value, u32)>> = self
            .knobs
            .iter()
            .zip(config.values())
            .map(|(k, v)| k.knob.ball(v, n))
            .collect();
        let mut out = Vec::new();
        let mut values = config.values().to_vec();
        self.combine_balls(&balls, 0, n, false, &mut values, &mut out);
        Ok(out)
    }

    /// Every way to pick one entry per knob's ball with total distance within `budget`.
    fn combine_balls(
        &self,
        balls: &[Vec<(Value, u32)>],
        knob: usize,
        budget: u32,
        moved: bool,
        values: &mut Vec<Value>,
        out: &mut Vec<Config>,
    ) {
        let Some(ball) = balls.get(knob) else {
            if moved {
                let candidate = Config::new(values.clone());
                if self.satisfies(&candidate) {
                    out.push(candidate);
                }
            }
            return;
        };
        let original = values[knob].clone();
        for (value, d) in ball {
            if *d > budget {
                continue;
            }
            values[knob] = value.clone();
            self.combine_balls(balls, knob + 1, budget - d, moved || *d > 0, values, out);
        }
        values[knob] = original;
    }

    /// The fewest OpEvo moves from `a` to `b`, summed over knobs: per prime factor the
    /// fewest single-factor moves, `n − cycles` swaps for a permutation, `|i − j|` for a
    /// discrete knob, 0 or 1 for a categorical one. Constraints and part bounds are ignored.
    pub fn hop_distance(&self, a: &Config, b: &Config) -> Result<u64> {
        self.check_shape(a)?;
        self.check_shape(b)?;
        Ok(self
            .knobs
            .iter()
            .zip(a.values().iter().zip(b.values()))
            .map(|(k, (x, y))| k.knob.distance(x, y))
            .sum())
    }

    // ----- enumeration -----------------------------------------------------------------

    /// Every valid config, in ascending order, for spaces of at most `cap` points (counted
    /// before constraints).
    ///
    /// # Errors
    /// [`Error::TooLarge`] when [`size`](Self::size) exceeds `cap`.
    pub fn enumerate(&self, cap: usize) -> Result<Vec<Config>> {
        let size = self.size();
        if size > cap as u128 {
            return Err(Error::TooLarge { size, cap });
        }
        let lists: Vec<Vec<Value>> = self.knobs.iter().map(|k| k.knob.enumerate()).collect();
        let mut out = Vec::new();
        let mut at = vec![0usize; lists.len()];
        loop {
            let values: Option<Vec<Value>> = lists
                .iter()
                .zip(&at)
                .map(|(list, &i)| list.get(i).cloned())
                .collect();
            let Some(values) = values else {
                break; // a knob without values: nothing to list
            };
            let config = Config::new(values);
            if self.satisfies(&config) {
                out.push(config);
            }
            // Odometer, last knob fastest.
            let mut k = lists.len();
            loop {
                if k == 0 {
                    return Ok(out);
                }
                k -= 1;
                at[k] += 1;
                if at[k] < lists[k].len() {
                    break;
                }
                at[k] = 0;
            }
        }
        Ok(out)
    }

    // ----- features --------------------------------------------------------------------

    /// A numeric description of `config` for learned cost models, knob by knob:
    /// `log2` of each factor, the position of each permuted item, the discrete index, a
    /// one-hot vector for a categorical knob. [`feature_names`](Self::feature_names) names
    /// the entries.
    pub fn to_features(&self, config: &Config) -> Result<Vec<f64>> {
        self.check_shape(config)?;
        let mut out = Vec::new();
        for (k, v) in self.knobs.iter().zip(config.values()) {
            k.knob.features(v, &mut out);
        }
        Ok(out)
    }

    /// The names of the entries of [`to_features`](Self::to_features), e.g.
    /// `tile_i[0].log2`, `order.pos[2]`, `unroll.index`, `vec=f32x4`.
    pub fn feature_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for k in &self.knobs {
            k.knob.feature_names(&k.name, &mut out);
        }
        out
    }

    // ----- text form (see `text.rs`) ---------------------------------------------------

    pub(crate) fn named_knobs(&self) -> impl Iterator<Item = (&str, &Knob)> {
        self.knobs.iter().map(|k| (k.name.as_str(), &k.knob))
    }

    pub(crate) fn check_fits(&self, config: &Config) -> Result<()> {
        self.check_shape(config)
    }
}

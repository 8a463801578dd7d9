//! A point of a search space: one [`Value`] per knob, in the space's knob order.
//!
//! A `Config` is a plain value: it does not know its space, so it is cheap to clone, hash
//! and compare, and strategies can keep "seen" sets of them and build children from the
//! values of two parents ([`Config::new`], [`Config::values`], [`Config::with_value`]).
//! Whether it fits a space is decided by [`SearchSpace::check`](crate::SearchSpace::check);
//! its human-readable text form needs the space too
//! ([`SearchSpace::format`](crate::SearchSpace::format),
//! [`SearchSpace::parse`](crate::SearchSpace::parse)).
//!
//! With serde a config is a list of tagged values, e.g.
//! `[{"factorization":[4,2,8]},{"permutation":[1,0,2]},{"discrete":2},{"categorical":0}]`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The value of one knob.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Value {
    /// The ordered factors of a [`Factorization`](crate::Factorization) knob; their product
    /// is the knob's extent.
    Factorization(Vec<u64>),
    /// The order of the items `0..n` of a [`Permutation`](crate::Permutation) knob.
    Permutation(Vec<usize>),
    /// The index into the value list of a [`Discrete`](crate::Discrete) knob.
    Discrete(usize),
    /// The index into the choice list of a [`Categorical`](crate::Categorical) knob.
    Categorical(usize),
}

impl Value {
    /// The factors, if this is a factorization value.
    pub fn as_factors(&self) -> Option<&[u64]> {
        match self {
            Value::Factorization(f) => Some(f),
            _ => None,
        }
    }

    /// The order, if this is a permutation value.
    pub fn as_permutation(&self) -> Option<&[usize]> {
        match self {
            Value::Permutation(p) => Some(p),
            _ => None,
        }
    }

    /// The index, if this is a discrete or categorical value.
    pub fn as_index(&self) -> Option<usize> {
        match self {
            Value::Discrete(i) | Value::Categorical(i) => Some(*i),
            _ => None,
        }
    }
}

/// A point of a search space: the value of every knob, in the space's knob order.
///
/// Ordering is lexicographic over the values, so sorted lists of configs are stable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Config {
    values: Vec<Value>,
}

impl Config {
    /// A config from its values, one per knob in the space's order. It is not checked here;
    /// use [`SearchSpace::check`](crate::SearchSpace::check).
    pub fn new(values: Vec<Value>) -> Self {
        Config { values }
    }

    /// Every knob's value, in knob order.
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// The values, consumed.
    pub fn into_values(self) -> Vec<Value> {
        self.values
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the config has no values (the single point of a space without knobs).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value of knob `knob`.
    pub fn value(&self, knob: usize) -> Option<&Value> {
        self.values.get(knob)
    }

    /// A copy with the value of knob `knob` replaced (for crossover and coordinate moves).
    /// The result is not checked against a space.
    pub fn with_value(&self, knob: usize, value: Value) -> Result<Config> {
        let mut values = self.values.clone();
        let count = values.len();
        let slot = values
            .get_mut(knob)
            .ok_or(Error::KnobIndex { index: knob, count })?;
        *slot = value;
        Ok(Config { values })
    }

    /// The factors of knob `knob`, if it is a factorization.
    pub fn factors(&self, knob: usize) -> Option<&[u64]> {
        self.value(knob).and_then(Value::as_factors)
    }

    /// The order of knob `knob`, if it is a permutation.
    pub fn permutation(&self, knob: usize) -> Option<&[usize]> {
        self.value(knob).and_then(Value::as_permutation)
    }

    /// The index of knob `knob`, if it is discrete or categorical.
    pub fn index(&self, knob: usize) -> Option<usize> {
        self.value(knob).and_then(Value::as_index)
    }
}

//! The four kinds of knob and the OpEvo topology of each: which values are one hop apart,
//! how many hops separate two values, how to sample and list the values, and how a value
//! is written in the text form and in a feature vector.
//!
//! | kind | value | one hop | hop distance |
//! |---|---|---|---|
//! | [`Factorization`] | ordered factors of an extent | move one prime factor from one part to another | per prime, half the L1 distance of the exponent vectors |
//! | [`Permutation`] | an order of `0..n` | swap two positions | `n − cycles` |
//! | [`Discrete`] | index into an ordered list | adjacent index | `|i − j|` |
//! | [`Categorical`] | index into an unordered list | any other choice | 0 or 1 |

mod categorical;
mod discrete;
mod factorization;
mod permutation;

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::str::FromStr;

use rand::Rng;

use crate::config::Value;

pub use categorical::Categorical;
pub use discrete::Discrete;
pub use factorization::Factorization;
pub use permutation::Permutation;

/// One knob of a [`SearchSpace`](crate::SearchSpace), of one of the four kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Knob {
    /// Ordered factors whose product is an extent.
    Factorization(Factorization),
    /// An order of `n` items.
    Permutation(Permutation),
    /// An ordered list of integers.
    Discrete(Discrete),
    /// An unordered list of named choices.
    Categorical(Categorical),
}

impl From<Factorization> for Knob {
    fn from(k: Factorization) -> Self {
        Knob::Factorization(k)
    }
}

impl From<Permutation> for Knob {
    fn from(k: Permutation) -> Self {
        Knob::Permutation(k)
    }
}

impl From<Discrete> for Knob {
    fn from(k: Discrete) -> Self {
        Knob::Discrete(k)
    }
}

impl From<Categorical> for Knob {
    fn from(k: Categorical) -> Self {
        Knob::Categorical(k)
    }
}

impl Knob {
    /// The kind's name, as used in messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Knob::Factorization(_) => "factorization",
            Knob::Permutation(_) => "permutation",
            Knob::Discrete(_) => "discrete",
            Knob::Categorical(_) => "categorical",
        }
    }

    /// The number of values of the knob (saturating at `u128::MAX`).
    pub fn size(&self) -> u128 {
        match self {
            Knob::Factorization(k) => k.size(),
            Knob::Permutation(k) => k.size(),
            Knob::Discrete(k) => k.size(),
            Knob::Categorical(k) => k.size(),
        }
    }

    /// Why the knob's parameters give it no values, if they do not.
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self {
            Knob::Factorization(k) => k.validate(),
            Knob::Permutation(k) => k.validate(),
            Knob::Discrete(k) => k.validate(),
            Knob::Categorical(k) => k.validate(),
        }
    }

    /// Whether `value` is a value of this knob, and why not.
    pub(crate) fn check(&self, value: &Value) -> Result<(), String> {
        match (self, value) {
            (Knob::Factorization(k), Value::Factorization(v)) => k.check(v),
            (Knob::Permutation(k), Value::Permutation(v)) => k.check(v),
            (Knob::Discrete(k), Value::Discrete(v)) => k.check(*v),
            (Knob::Categorical(k), Value::Categorical(v)) => k.check(*v),
            _ => Err(format!("expected a {} value, got {value:?}", self.kind())),
        }
    }

    /// A value drawn uniformly.
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Value {
        match self {
            Knob::Factorization(k) => Value::Factorization(k.sample(rng)),
            Knob::Permutation(k) => Value::Permutation(k.sample(rng)),
            Knob::Discrete(k) => Value::Discrete(k.sample(rng)),
            Knob::Categorical(k) => Value::Categorical(k.sample(rng)),
        }
    }

    /// The values one hop from `value` (a checked value of this knob).
    pub(crate) fn neighbors(&self, value: &Value) -> Vec<Value> {
        match (self, value) {
            (Knob::Factorization(k), Value::Factorization(v)) => k
                .neighbors(v)
                .into_iter()
                .map(Value::Factorization)
                .collect(),
            (Knob::Permutation(k), Value::Permutation(v)) => {
                k.neighbors(v).into_iter().map(Value::Permutation).collect()
            }
            (Knob::Discrete(k), Value::Discrete(v)) => {
                k.neighbors(*v).into_iter().map(Value::Discrete).collect()
            }
            (Knob::Categorical(k), Value::Categorical(v)) => k
                .neighbors(*v)
                .into_iter()
                .map(Value::Categorical)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The hop distance between two checked values of this knob.
    pub(crate) fn distance(&self, a: &Value, b: &Value) -> u64 {
        match (self, a, b) {
            (Knob::Factorization(k), Value::Factorization(a), Value::Factorization(b)) => {
                k.distance(a, b)
            }
            (Knob::Permutation(k), Value::Permutation(a), Value::Permutation(b)) => {
                k.distance(a, b)
            }
            (Knob::Discrete(k), Value::Discrete(a), Value::Discrete(b)) => k.distance(*a, *b),
            (Knob::Categorical(k), Value::Categorical(a), Value::Categorical(b)) => {
                k.distance(*a, *b)
            }
            _ => 0,
        }
    }

    /// Every value within `radius` hops of `value`, with its distance; `value` itself comes
    /// first, at distance 0.
    pub(crate) fn ball(&self, value: &Value, radius: u32) -> Vec<(Value, u32)> {
        fn wrap<V>(ball: Vec<(V, u32)>, f: fn(V) -> Value) -> Vec<(Value, u32)> {
            ball.into_iter().map(|(v, d)| (f(v), d)).collect()
        }
        match (self, value) {
            (Knob::Factorization(k), Value::Factorization(v)) => {
                wrap(k.ball(v, radius), Value::Factorization)
            }
            (Knob::Permutation(k), Value::Permutation(v)) => {
                wrap(k.ball(v, radius), Value::Permutation)
            }
            (Knob::Discrete(k), Value::Discrete(v)) => wrap(k.ball(*v, radius), Value::Discrete),
            (Knob::Categorical(k), Value::Categorical(v)) => {
                wrap(k.ball(*v, radius), Value::Categorical)
            }
            _ => vec![(value.clone(), 0)],
        }
    }

    /// Every value, in ascending order.
    pub(crate) fn enumerate(&self) -> Vec<Value> {
        match self {
            Knob::Factorization(k) => k
                .enumerate()
                .into_iter()
                .map(Value::Factorization)
                .collect(),
            Knob::Permutation(k) => k.enumerate().into_iter().map(Value::Permutation).collect(),
            Knob::Discrete(k) => (0..k.len()).map(Value::Discrete).collect(),
            Knob::Categorical(k) => (0..k.len()).map(Value::Categorical).collect(),
        }
    }

    /// Appends the features of a checked value.
    pub(crate) fn features(&self, value: &Value, out: &mut Vec<f64>) {
        match (self, value) {
            (Knob::Factorization(k), Value::Factorization(v)) => k.features(v, out),
            (Knob::Permutation(k), Value::Permutation(v)) => k.features(v, out),
            (Knob::Discrete(k), Value::Discrete(v)) => k.features(*v, out),
            (Knob::Categorical(k), Value::Categorical(v)) => k.features(*v, out),
            _ => {}
        }
    }

    /// Appends the names of the features, prefixed by the knob's name.
    pub(crate) fn feature_names(&self, name: &str, out: &mut Vec<String>) {
        match self {
            Knob::Factorization(k) => k.feature_names(name, out),
            Knob::Permutation(k) => k.feature_names(name, out),
            Knob::Discrete(k) => k.feature_names(name, out),
            Knob::Categorical(k) => k.feature_names(name, out),
        }
    }

    /// Appends the text form of a checked value.
    pub(crate) fn format(&self, value: &Value, out: &mut String) {
        match (self, value) {
            (Knob::Factorization(_), Value::Factorization(v)) => format_list(v, out),
            (Knob::Permutation(_), Value::Permutation(v)) => format_list(v, out),
            (Knob::Discrete(k), Value::Discrete(v)) => k.format(*v, out),
            (Knob::Categorical(k), Value::Categorical(v)) => k.format(*v, out),
            _ => out.push('?'),
        }
    }

    /// Reads the text form of a value (not yet checked against the knob).
    pub(crate) fn parse(&self, text: &str) -> Result<Value, String> {
        match self {
            Knob::Factorization(_) => parse_list(text).map(Value::Factorization),
            Knob::Permutation(_) => parse_list(text).map(Value::Permutation),
            Knob::Discrete(k) => k.parse(text).map(Value::Discrete),
            Knob::Categorical(k) => k.parse(text).map(Value::Categorical),
        }
    }
}

/// Whether `name` may be used as a knob or choice name in the text form: non-empty ASCII
/// letters, digits and `_ . - +`.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.-+".contains(*c)))
    {
        Some(c) => Err(format!(
            "`{name}` contains {c:?}; names use ASCII letters, digits and `_ . - +` only"
        )),
        None => Ok(()),
    }
}

/// `[a,b,c]`
fn format_list<T: std::fmt::Display>(items: &[T], out: &mut String) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item.to_string());
    }
    out.push(']');
}

/// Reads `[a,b,c]` (spaces allowed around items).
fn parse_list<T: FromStr>(text: &str) -> Result<Vec<T>, String> {
    let inner = text
        .trim()
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(|| format!("expected a list like `[4,2,8]`, got `{text}`"))?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .map(|item| {
            let item = item.trim();
            item.parse::<T>()
                .map_err(|_| format!("`{item}` is not a non-negative integer"))
        })
        .collect()
}

/// Breadth-first search from `start` along `step`, up to `radius` hops. Returns each
/// reached value once, with its hop count, `start` first. Deterministic (queue order).
fn bfs_ball<V, F>(start: V, radius: u32, step: F) -> Vec<(V, u32)>
where
    V: Clone + Eq + Hash,
    F: Fn(&V) -> Vec<V>,
{
    let mut seen: HashSet<V> = HashSet::new();
    seen.insert(start.clone());
    let mut out = vec![(start.clone(), 0)];
    let mut queue = VecDeque::from([(start, 0u32)]);
    while let Some((v, d)) = queue.pop_front() {
        if d >= radius {
            continue;
        }
        for w in step(&v) {
            if seen.insert(w.clone()) {
                out.push((w.clone(), d + 1));
                queue.push_back((w, d + 1));
            }
        }
    }
    out
}

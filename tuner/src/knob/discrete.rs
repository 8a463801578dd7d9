//! Discrete knobs: an ordered list of integers, e.g. an unroll depth.

use rand::Rng;

/// An ordered list of distinct integers, e.g. `unroll ∈ {0, 16, 64, 512}`. A config holds
/// the index into the list; one hop moves to an adjacent index; the hop distance is
/// `|i − j|`. The text form writes the integer itself (`unroll=64`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discrete {
    values: Vec<i64>,
}

impl Discrete {
    /// The list, in the order that defines adjacency. It must be non-empty with distinct
    /// values.
    pub fn new(values: impl Into<Vec<i64>>) -> Self {
        Discrete {
            values: values.into(),
        }
    }

    /// The list.
    pub fn values(&self) -> &[i64] {
        &self.values
    }

    /// The integer at `index`.
    pub fn get(&self, index: usize) -> Option<i64> {
        self.values.get(index).copied()
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the list is empty (such a knob is rejected when the space is built).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The number of values.
    pub fn size(&self) -> u128 {
        self.values.len() as u128
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.values.is_empty() {
            return Err("the list of values is empty".into());
        }
        for (i, v) in self.values.iter().enumerate() {
            if self.values[..i].contains(v) {
                return Err(format!("the value {v} appears twice"));
            }
        }
        Ok(())
    }

    pub(crate) fn check(&self, index: usize) -> Result<(), String> {
        if index >= self.values.len() {
            return Err(format!(
                "index {index} is out of range: there are {} values",
                self.values.len()
            ));
        }
        Ok(())
    }

    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        rng.gen_range(0..self.values.len().max(1))
    }

    pub(crate) fn neighbors(&self, index: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(2);
        if index > 0 {
            out.push(index - 1);
        }
        if index + 1 < self.values.len() {
            out.push(index + 1);
        }
        out
    }

    pub(crate) fn distance(&self, a: usize, b: usize) -> u64 {
        a.abs_diff(b) as u64
    }

    pub(crate) fn ball(&self, index: usize, radius: u32) -> Vec<(usize, u32)> {
        let mut out = vec![(index, 0)];
        for d in 1..=radius as usize {
            if d > self.values.len() {
                break;
            }
            if let Some(lower) = index.checked_sub(d) {
                out.push((lower, d as u32));
            }
            if index + d < self.values.len() {
                out.push((index + d, d as u32));
            }
        }
        out
    }

    /// The index.
    pub(crate) fn features(&self, index: usize, out: &mut Vec<f64>) {
        out.push(index as f64);
    }

    pub(crate) fn feature_names(&self, name: &str, out: &mut Vec<String>) {
        out.push(format!("{name}.index"));
    }

    pub(crate) fn format(&self, index: usize, out: &mut String) {
        match self.get(index) {
            Some(v) => out.push_str(&v.to_string()),
            None => out.push('?'),
        }
    }

    pub(crate) fn parse(&self, text: &str) -> Result<usize, String> {
        let text = text.trim();
        let value: i64 = text
            .parse()
            .map_err(|_| format!("`{text}` is not an integer"))?;
        self.values
            .iter()
            .position(|&v| v == value)
            .ok_or_else(|| format!("{value} is not one of {:?}", self.values))
    }
}

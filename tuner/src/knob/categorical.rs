//! Categorical knobs: an unordered list of named choices, e.g. a vector type.

use rand::Rng;

/// An unordered list of distinct named choices, e.g. `vec ∈ {f32, f32x4, f32x8}`. A config
/// holds the index of the choice; every other choice is one hop away. The text form writes
/// the name (`vec=f32x4`). Names use ASCII letters, digits and `_ . - +`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Categorical {
    choices: Vec<String>,
}

impl Categorical {
    /// The choices. They must be non-empty, distinct, valid names.
    pub fn new<S: Into<String>>(choices: impl IntoIterator<Item = S>) -> Self {
        Categorical {
            choices: choices.into_iter().map(Into::into).collect(),
        }
    }

    /// The choices' names.
    pub fn choices(&self) -> &[String] {
        &self.choices
    }

    /// The name of the choice at `index`.
    pub fn get(&self, index: usize) -> Option<&str> {
        self.choices.get(index).map(String::as_str)
    }

    /// The number of choices.
    pub fn len(&self) -> usize {
        self.choices.len()
    }

    /// Whether there are no choices (such a knob is rejected when the space is built).
    pub fn is_empty(&self) -> bool {
        self.choices.is_empty()
    }

    /// The number of choices.
    pub fn size(&self) -> u128 {
        self.choices.len() as u128
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.choices.is_empty() {
            return Err("the list of choices is empty".into());
        }
        for (i, c) in self.choices.iter().enumerate() {
            super::check_name(c)?;
            if self.choices[..i].contains(c) {
                return Err(format!("the choice `{c}` appears twice"));
            }
        }
        Ok(())
    }

    pub(crate) fn check(&self, index: usize) -> Result<(), String> {
        if index >= self.choices.len() {
            return Err(format!(
                "index {index} is out of range: there are {} choices",
                self.choices.len()
            ));
        }
        Ok(())
    }

    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        rng.gen_range(0..self.choices.len().max(1))
    }

    pub(crate) fn neighbors(&self, index: usize) -> Vec<usize> {
        (0..self.choices.len()).filter(|&i| i != index).collect()
    }

    pub(crate) fn distance(&self, a: usize, b: usize) -> u64 {
        u64::from(a != b)
    }

    pub(crate) fn ball(&self, index: usize, radius: u32) -> Vec<(usize, u32)> {
        let mut out = vec![(index, 0)];
        if radius > 0 {
            out.extend(self.neighbors(index).into_iter().map(|i| (i, 1)));
        }
        out
    }

    /// One-hot.
    pub(crate) fn features(&self, index: usize, out: &mut Vec<f64>) {
        out.extend((0..self.choices.len()).map(|i| if i == index { 1.0 } else { 0.0 }));
    }

    pub(crate) fn feature_names(&self, name: &str, out: &mut Vec<String>) {
        out.extend(self.choices.iter().map(|c| format!("{name}={c}")));
    }

    pub(crate) fn format(&self, index: usize, out: &mut String) {
        out.push_str(self.get(index).unwrap_or("?"));
    }

    pub(crate) fn parse(&self, text: &str) -> Result<usize, String> {
        let text = text.trim();
        self.choices
            .iter()
            .position(|c| c == text)
            .ok_or_else(|| format!("`{text}` is not one of {:?}", self.choices))
    }
}

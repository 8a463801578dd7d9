//! The text form of a config: stable, human-readable, and checked when read back.
//!
//! ```text
//! config := "" | entry (";" entry)*
//! entry  := knob-name "=" value
//! value  := "[" u64 ("," u64)* "]"      factorization: the factors, outermost first
//!         | "[" usize ("," usize)* "]"  permutation: the items in order
//!         | i64                         discrete: the integer itself, not its index
//!         | choice-name                 categorical: the choice's name
//! ```
//!
//! [`SearchSpace::format`] writes the entries in knob order without spaces, e.g.
//! `tile_i=[4,2,8,1,1];order=[1,0,2];unroll=64;vec=f32x8`. Names use ASCII letters, digits
//! and `_ . - +`, so `=`, `;`, `,` and brackets never occur inside one. [`SearchSpace::parse`]
//! also accepts the entries in any order and spaces around tokens, and rejects unknown,
//! repeated and missing knobs. Writing discrete values (not indices) makes a record
//! readable and makes a changed value list fail loudly instead of being misread.

use crate::config::{Config, Value};
use crate::error::{Error, Result};
use crate::space::SearchSpace;

impl SearchSpace {
    /// The text form of `config` (see the [module docs](crate::text)). The config's values
    /// must fit the knobs; constraints are not consulted, so rejected configs can be logged.
    pub fn format(&self, config: &Config) -> Result<String> {
        self.check_fits(config)?;
        let mut out = String::new();
        for (i, ((name, knob), value)) in self.named_knobs().zip(config.values()).enumerate() {
            if i > 0 {
                out.push(';');
            }
            out.push_str(name);
            out.push('=');
            knob.format(value, &mut out);
        }
        Ok(out)
    }

    /// Reads the text form and checks the config against the space, constraints included.
    ///
    /// # Errors
    /// [`Error::Parse`] for malformed text and unknown, repeated or missing knobs; the errors
    /// of [`check`](Self::check) for a config that is not valid.
    pub fn parse(&self, text: &str) -> Result<Config> {
        let fail = |reason: String| Error::Parse {
            text: text.to_string(),
            reason,
        };
        let mut values: Vec<Option<Value>> = vec![None; self.knob_count()];
        if !text.trim().is_empty() {
            for entry in text.split(';') {
                let (name, value) = entry
                    .split_once('=')
                    .ok_or_else(|| fail(format!("entry `{entry}` has no `=`")))?;
                let name = name.trim();
                let index = self.knob_index(name).ok_or_else(|| {
                    let known: Vec<&str> = self.named_knobs().map(|(n, _)| n).collect();
                    fail(format!(
                        "unknown knob `{name}`; the knobs are {}",
                        known.join(", ")
                    ))
                })?;
                let (slot, knob) = values
                    .get_mut(index)
                    .zip(self.knob(index))
                    .ok_or_else(|| fail(format!("unknown knob `{name}`")))?;
                if slot.is_some() {
                    return Err(fail(format!("knob `{name}` is given twice")));
                }
                *slot = Some(
                    knob.parse(value)
                        .map_err(|reason| fail(format!("knob `{name}`: {reason}")))?,
                );
            }
        }
        let mut found = Vec::with_capacity(values.len());
        for (i, value) in values.into_iter().enumerate() {
            match value {
                Some(v) => found.push(v),
                None => {
                    let name = self.knob_name(i).unwrap_or("?");
                    return Err(fail(format!("knob `{name}` is missing")));
                }
            }
        }
        let config = Config::new(found);
        self.check(&config)?;
        Ok(config)
    }
}

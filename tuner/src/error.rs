//! The one error type of the crate.

/// Everything that can go wrong when building or using a [`SearchSpace`](crate::SearchSpace).
/// Messages name the knob or constraint involved and say what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A knob was declared with parameters that give it no points, or with a bad name.
    #[error("knob `{knob}` is invalid: {reason}")]
    InvalidKnob { knob: String, reason: String },
    /// Two knobs share a name; the text form needs every name to be unique.
    #[error("knob name `{0}` is used twice; give every knob its own name")]
    DuplicateKnob(String),
    /// A constraint was declared with an empty or repeated name.
    #[error("constraint `{name}` is invalid: {reason}")]
    InvalidConstraint { name: String, reason: String },
    /// A config has a different number of values than the space has knobs.
    #[error("the config has {found} values but the space has {expected} knobs")]
    WrongKnobCount { expected: usize, found: usize },
    /// A knob index is out of range.
    #[error("knob index {index} is out of range: there are {count} knobs")]
    KnobIndex { index: usize, count: usize },
    /// A config's value does not fit its knob (wrong kind, wrong product, not a permutation,
    /// index out of range, outside a bound, ...).
    #[error("the value of knob `{knob}` does not fit it: {reason}")]
    InvalidValue { knob: String, reason: String },
    /// A config fits every knob but a constraint rejects it.
    #[error("the config violates constraint `{0}`")]
    ConstraintViolated(String),
    /// The text form of a config could not be read.
    #[error("cannot parse config text `{text}`: {reason}")]
    Parse { text: String, reason: String },
    /// Rejection sampling found no config that satisfies every constraint.
    #[error(
        "no config satisfying every constraint was found in {tries} uniform samples \
         (constraint `{constraint}` rejected the most); relax the constraints or raise \
         `max_tries` on the builder"
    )]
    Unsatisfiable { tries: usize, constraint: String },
    /// [`SearchSpace::enumerate`](crate::SearchSpace::enumerate) was asked to list a space
    /// larger than its cap.
    #[error(
        "the space has {size} points, more than the cap of {cap}; raise the cap or sample \
         the space instead"
    )]
    TooLarge { size: u128, cap: usize },
    /// No valid config other than the given one could be reached by mutation: the space
    /// (under its constraints) has a single point.
    #[error(
        "no valid config other than the given one was found; the space has a single valid point"
    )]
    NoMutation,
    /// The q-random-walk continuation probability is outside `[0, 1)`.
    #[error("the random-walk continuation probability q must be in [0, 1), got {0}")]
    InvalidProbability(f64),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

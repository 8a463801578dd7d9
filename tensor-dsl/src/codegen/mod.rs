//! Code generators.
pub mod c;

//! Schedule templates.
pub mod cpu;

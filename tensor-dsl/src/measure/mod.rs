//! Measurers: time schedule candidates for the tuner, verified against the reference.
pub mod cpu;

//! Runtimes that build and run generated code.
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod nvrtc;
pub mod ptxas;

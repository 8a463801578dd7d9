//! Runtimes that build and run generated code.
pub mod cpu;

//! Runtimes that build and run generated code.
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod nvrtc;
pub mod ptxas;

/// Why CUDA is unavailable in a build without the `cuda` feature.
pub const NO_CUDA_FEATURE: &str =
    "tensor-dsl was built without the `cuda` feature; enable it (it is on by default) to run on a GPU";

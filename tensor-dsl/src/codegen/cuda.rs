//! CUDA C — being written. The interface below is fixed: `CudaSource`, `generate`, `ENTRY`.
//!
//! Kernel parameters: the inputs' data pointers in declaration order
//! (`const float *__restrict__`), then the output (`float *__restrict__`).

use crate::ir::Kernel;
use crate::template::gpu::GpuSchedule;

/// Name of the `extern "C" __global__` entry point.
pub const ENTRY: &str = "td_kernel";

/// A generated kernel and its launch geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSource {
    pub source: String,
    pub entry: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes (0 when the kernel uses only static shared memory).
    pub shared_bytes: u32,
}

/// Generates CUDA C for `kernel` at these extents/shapes with `schedule` (stub).
pub fn generate(
    _kernel: &Kernel,
    _extents: &[usize],
    _shapes: &[&[usize]],
    _schedule: &GpuSchedule,
) -> CudaSource {
    CudaSource {
        source: String::new(),
        entry: ENTRY.into(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
    }
}

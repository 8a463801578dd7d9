//! The GPU (SIMT) schedule template — being written. The interface below is fixed:
//! `GpuTarget`, `GpuSchedule`, `default_schedule`.

use crate::ir::Kernel;
use serde::{Deserialize, Serialize};

/// What the template needs to know about a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuTarget {
    /// Device name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability as major*10+minor, e.g. 90.
    pub sm: u32,
    pub sm_count: u32,
    pub max_threads_per_block: u32,
    /// Static shared memory per block, bytes.
    pub max_shared_per_block: u32,
    pub shared_per_sm: u32,
    pub regs_per_sm: u32,
    pub max_regs_per_thread: u32,
    pub max_threads_per_sm: u32,
    pub warp_size: u32,
}

impl GpuTarget {
    /// The H100 SXM (sm_90), the GPU we measure on.
    pub fn h100() -> GpuTarget {
        GpuTarget {
            name: "NVIDIA H100".into(),
            sm: 90,
            sm_count: 132,
            max_threads_per_block: 1024,
            max_shared_per_block: 48 * 1024,
            shared_per_sm: 228 * 1024,
            regs_per_sm: 65536,
            max_regs_per_thread: 255,
            max_threads_per_sm: 2048,
            warp_size: 32,
        }
    }

    /// NVRTC's virtual architecture, e.g. `compute_90`.
    pub fn virtual_arch(&self) -> String {
        format!("compute_{}", self.sm)
    }

    /// ptxas's real architecture, e.g. `sm_90`.
    pub fn real_arch(&self) -> String {
        format!("sm_{}", self.sm)
    }
}

/// One point of the GPU schedule space (stub).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSchedule {}

/// The schedule used without tuning (stub).
pub fn default_schedule(_kernel: &Kernel, _extents: &[usize], _target: &GpuTarget) -> GpuSchedule {
    GpuSchedule {}
}

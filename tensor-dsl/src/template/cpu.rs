//! The CPU schedule: a register tile over (up to) two output axes, a parallel outer loop.
//!
//! The generated loop nest (see [`crate::codegen::c`]) is
//!
//! ```text
//! parallel for every other output index, v0 in steps of `vector`, u0 in steps of `unroll`:
//!     (if packing) refill this thread's panel of the vector operand when v0 changed
//!     acc[unroll][vector] = 0
//!     for every reduction point (r0, r1, ...):
//!         for u < unroll, v < vector:            // v innermost: vectorized
//!             acc[u][v] += body(..., u0 + u, v0 + v, r...)
//!     out[...] = epilogue(acc[u][v])              // fused, one store per element
//! ```
//!
//! Tiles that do not divide an extent are predicated (the edge tiles run with smaller
//! trip counts), so every shape runs.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let cfg = CpuConfig::heuristic(&k, &[512, 512, 512], 16);
//! assert_eq!((cfg.vector_axis, cfg.unroll_axis), (Some(1), Some(0)));
//! assert!(cfg.validate(&k).is_ok());
//! ```

use crate::ir::{Access, BodyKind, Kernel};
use serde::{Deserialize, Serialize};

/// One point of the CPU schedule space.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CpuConfig {
    /// Spatial index vectorized in the innermost loop (`None` for a rank-0 output).
    pub vector_axis: Option<usize>,
    /// Register-tile width along the vector axis.
    pub vector: usize,
    /// Second spatial index of the register tile.
    pub unroll_axis: Option<usize>,
    /// Register-tile height along the unroll axis.
    pub unroll: usize,
    /// Run the outer loops on all cores (OpenMP).
    pub parallel: bool,
    /// Copy the operand that varies along the vector axis (and not the unroll axis) into a
    /// contiguous per-thread panel, reused across the unroll axis (see [`packed_access`]).
    pub pack: bool,
}

/// Row stride (in floats) of a packed panel for a vector tile of `vector`: padded past the
/// tile and never a power of two. A panel whose rows are contiguous lets GCC vectorize
/// across the reduction instead of along the tile, and power-of-two strides cause cache-set
/// conflicts; either one measured 20x slower than this (512³ matmul, AVX-512).
pub fn pack_stride(vector: usize) -> usize {
    let s = vector + 8;
    if s.is_power_of_two() {
        s + 8
    } else {
        s
    }
}

/// Largest packed panel, in bytes.
pub const MAX_PACK_BYTES: usize = 4 << 20;

/// The input access a config packs, if any: the first read in the main statement that
/// depends on the vector axis and not on the unroll axis, when the kernel reduces and the
/// panel (every reduction point × the vector tile) fits in [`MAX_PACK_BYTES`].
///
/// Packing turns strided or transposed reads into one contiguous stream and removes the
/// cache-set conflicts of power-of-two row strides (measured: a 512×1024·1024×64 matmul
/// went from 7 to ~150 GFLOPS on a 2-core AVX-512 machine).
pub fn packed_access(kernel: &Kernel, extents: &[usize], config: &CpuConfig) -> Option<Access> {
    let v = config.vector_axis?;
    if !config.pack || kernel.kind != BodyKind::Sum || kernel.reduction().is_empty() {
        return None;
    }
    let points: usize = kernel.reduction().iter().map(|&r| extents[r]).product();
    if points
        .saturating_mul(pack_stride(config.vector))
        .saturating_mul(4)
        > MAX_PACK_BYTES
    {
        return None;
    }
    let uses = |a: &Access, i: usize| a.dims.iter().any(|d| d.terms.iter().any(|&(x, _)| x == i));
    let mut found = None;
    kernel.body.visit_accesses(&mut |a| {
        if found.is_none() && uses(a, v) && !config.unroll_axis.is_some_and(|u| uses(a, u)) {
            found = Some(a.clone());
        }
    });
    found
}

/// Register-tile elements we allow: beyond this GCC spills the accumulators.
pub const MAX_TILE: usize = 256;

impl CpuConfig {
    /// A sound default: the output's innermost axis vectorized two SIMD registers wide, the
    /// next axis unrolled 4 deep, outer loops parallel when the work is large enough to pay
    /// for the threads. `lanes` is the SIMD width in `f32` (16 for AVX-512, 8 for AVX2).
    pub fn heuristic(kernel: &Kernel, extents: &[usize], lanes: usize) -> CpuConfig {
        let spatial = kernel.spatial();
        let lanes = lanes.max(1);
        let vector_axis = spatial.last().copied();
        let unroll_axis = (spatial.len() >= 2).then(|| spatial[spatial.len() - 2]);
        let vector = match vector_axis {
            None => 1,
            Some(v) => {
                let e = extents[v];
                if e >= 2 * lanes {
                    2 * lanes
                } else if e >= lanes {
                    lanes
                } else {
                    e.next_power_of_two()
                }
            }
        };
        let unroll = match unroll_axis {
            None => 1,
            Some(u) => extents[u].min(4),
        };
        let work = kernel.flops(extents);
        CpuConfig {
            vector_axis,
            vector,
            unroll_axis,
            unroll,
            parallel: work >= 65_536.0,
            pack: true,
        }
    }

    /// The single-threaded, untiled schedule (for tests and baselines).
    pub fn naive(kernel: &Kernel) -> CpuConfig {
        let spatial = kernel.spatial();
        CpuConfig {
            vector_axis: spatial.last().copied(),
            vector: 1,
            unroll_axis: None,
            unroll: 1,
            parallel: false,
            pack: false,
        }
    }

    /// Checks the config fits the kernel: axes are distinct spatial indices, tiles are
    /// positive and the register tile is bounded.
    pub fn validate(&self, kernel: &Kernel) -> Result<(), String> {
        let spatial = kernel.spatial();
        for (axis, what) in [(self.vector_axis, "vector"), (self.unroll_axis, "unroll")] {
            if let Some(a) = axis {
                if !spatial.contains(&a) {
                    return Err(format!("{what} axis {a} is not a spatial index"));
                }
            }
        }
        if self.vector_axis.is_some() && self.vector_axis == self.unroll_axis {
            return Err("vector and unroll axes must differ".into());
        }
        if self.vector == 0 || self.unroll == 0 {
            return Err("tile sizes must be positive".into());
        }
        if self.vector_axis.is_none() && self.vector != 1
            || self.unroll_axis.is_none() && self.unroll != 1
        {
            return Err("a tile without an axis must have size 1".into());
        }
        if self.vector * self.unroll > MAX_TILE {
            return Err(format!(
                "register tile {}x{} exceeds {MAX_TILE} accumulators",
                self.unroll, self.vector
            ));
        }
        Ok(())
    }
}

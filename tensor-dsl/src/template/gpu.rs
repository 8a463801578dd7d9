//! The GPU (SIMT) schedule template, as a [`tuner::SearchSpace`], in two forms:
//!
//! * a kernel in GEMM form (two inputs multiplied and summed: matmuls, batched matmuls,
//!   convolutions; see [`super::gpu_simt::gemm_form`]) gets the SIMT GEMM space of
//!   [`super::gpu_simt`] — block, warp and thread tiles, k-tile, hot-loop unroll, `float4`
//!   loads, register-prefetch or `cp.async` pipeline, rasterization, split-K, fused
//!   reduction — and its analytic default; the schedule is a [`GpuSchedule`] whose `simt`
//!   field holds the knobs ([`simt_schedule`]);
//! * every other kernel of the language gets Ansor's multi-level tiling, below.
//!
//! Every spatial index (on the output) is split in five levels and every reduction index in
//! three; [`crate::codegen::cuda`] turns one point into this loop nest (Ansor's "SSSRRSRS"):
//!
//! ```text
//! block    (grid)           every spatial axis: blockIdx  -> b_ (the block's corner)
//! thread   (block)          every spatial axis: threadIdx -> t_ (the thread's offset),
//!                           plus `lanes` threads sharing one output's reduction
//! acc[...] = 0              vthread x reg1 x reg2 accumulators per spatial axis
//! for outer reduction:      o_  (one shared-memory stage per step)
//!     cooperative loads of the staged inputs' tiles; __syncthreads
//!     for middle reduction: m_  (split over the lanes)
//!         for vthread:      v_  (strided copies of the thread tile)
//!             the register-level loops, in the order of the permutation knob:
//!             reg1 u_ (spatial), inner w_ (reduction), reg2 w_ (spatial)
//!                 acc[...] += body
//!     __syncthreads
//! sum the lanes (warp shuffles, then shared memory beyond 32)
//! epilogue on each accumulator, one predicated store
//! ```
//!
//! Knobs (`name`: kind — meaning):
//! * `tile.<i>`: factorization of the padded extent of spatial index `i` into
//!   `[block, vthread, thread, reg1, reg2]`, of reduction index `k` into
//!   `[outer, middle, inner]` (`outer` steps stage the shared tiles; `middle × inner` is
//!   the tile's depth along `k`);
//! * `lanes`: discrete, threads that split the middle reduction loop of one output
//!   (1 = none; present when the kernel reduces);
//! * `stage.<tensor>`: discrete 0/1 per input access of the main statement — copy the
//!   block's tile of it into shared memory (cooperatively, once per outer step) or read
//!   global memory directly;
//! * `vector`: discrete {1, 2, 4}, the widest load of a cooperative copy (used where the
//!   alignment is provable: the tile's row is a plain index with a span and a tensor row
//!   that are multiples of the width; narrower otherwise);
//! * `unroll`: discrete {0, 16, 64, 512}, Ansor's `auto_unroll_max_step` — a loop inside
//!   the outer reduction loop gets `#pragma unroll` when it and its inner loops run at most
//!   this many iterations;
//! * `order`: permutation of the register-level loops (reg1 of each spatial index, inner of
//!   each reduction index, reg2 of each spatial index — in that item order; the identity is
//!   Ansor's order).
//!
//! Constraints: threads per block ≤ the target's limit, accumulators per thread ≤
//! [`MAX_ACCUMULATORS`], shared memory per block ≤ the target's static limit, at most
//! [`MAX_BLOCKS`] blocks, and no more lanes than middle reduction iterations.
//!
//! Awkward extents: a spatial extent is padded up (see [`padded_extent`]) and the padded
//! points are computed but never stored; a reduction extent is padded only when a padded
//! point provably adds zero (see [`pads_to_zero`]), else it is tiled as it is. Reads
//! outside a tensor are zero, so every shape runs. One thread per block, one accumulator,
//! no staging is a valid point for every output of fewer than 2^31 elements, so the space
//! is never empty.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::gpu::{default_schedule, GpuTarget, GpuTemplate};
//! let target = GpuTarget::h100();
//! // A matmul is in GEMM form: the SIMT GEMM space.
//! let mm = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let s = default_schedule(&mm, &[4096, 4096, 4096], &target);
//! assert_eq!((s.threads(&mm), s.simt.as_ref().unwrap().tm), (256, 8));
//! // A matrix-vector product is not: Ansor's space.
//! let k = parse_text("mv", "o[[i]] += a[[i,k]] * b[[k]]", None).unwrap();
//! let t = GpuTemplate::new(&k, &[1000, 1000], &target).unwrap();
//! assert_eq!(t.padded(), &[1024, 1024]);
//! let s = default_schedule(&k, &[1000, 1000], &target);
//! assert!(s.simt.is_none());
//! assert_eq!(t.decode(&t.default_config().unwrap()).unwrap(), s);
//! let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
//! let point = t.space().sample_uniform(&mut rng).unwrap();
//! assert!(t.decode(&point).unwrap().shared_bytes(&k) <= 48 * 1024);
//! ```

use super::gpu_simt::{gemm_form, GemmForm, SimtGemm};
use crate::ir::{Access, BinOp, BodyKind, Expr, Func, IndexKind, Kernel};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tuner::{Config, Discrete, Factorization, Permutation, SearchSpace, Value};

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
    /// Whether code may use the architecture-specific features of this exact compute
    /// capability (the `a` targets: `compute_90a`/`sm_90a` have `wgmma`). Such code runs
    /// only on that compute capability, so it is for code compiled for the device at hand
    /// (the runtime sets it on a 9.0 GPU) or asked for by name (`--target cuda:sm_90a`).
    #[serde(default)]
    pub arch_specific: bool,
}

impl GpuTarget {
    /// The H100 SXM as a portable sm_90 target (no `wgmma`): what `--target cuda:sm_90`
    /// compiles for.
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
            arch_specific: false,
        }
    }

    /// The H100 with its architecture-specific features (`sm_90a`: `wgmma`), as the
    /// runtime sees an H100 and `--target cuda:sm_90a` names it.
    pub fn h100_sm90a() -> GpuTarget {
        GpuTarget {
            arch_specific: true,
            ..GpuTarget::h100()
        }
    }

    /// Whether the target has Hopper's warpgroup MMA (`wgmma.mma_async`): `sm_90a` only
    /// (`sm_90` without the suffix has no `wgmma`, and later architectures replace it).
    pub fn has_wgmma(&self) -> bool {
        self.sm == 90 && self.arch_specific
    }

    /// Shared memory a block may use with the opt-in attribute (dynamic shared memory),
    /// bytes: an SM's shared memory less the 1 KiB the system reserves per block (227 KiB
    /// on an H100, 163 KiB on an A100).
    pub fn max_dynamic_shared(&self) -> u32 {
        self.shared_per_sm.saturating_sub(RESERVED_SHARED_PER_BLOCK)
    }

    /// How many blocks using `bytes` of shared memory each the shared memory of one SM
    /// holds (each block also takes the [`RESERVED_SHARED_PER_BLOCK`] the system keeps).
    pub fn blocks_by_shared(&self, bytes: usize) -> usize {
        self.shared_per_sm as usize / (bytes + RESERVED_SHARED_PER_BLOCK as usize)
    }

    /// `a` for an architecture-specific target, else nothing.
    fn suffix(&self) -> &'static str {
        if self.arch_specific {
            "a"
        } else {
            ""
        }
    }

    /// NVRTC's virtual architecture, e.g. `compute_90` (`compute_90a` when
    /// [`GpuTarget::arch_specific`]).
    pub fn virtual_arch(&self) -> String {
        format!("compute_{}{}", self.sm, self.suffix())
    }

    /// ptxas's real architecture, e.g. `sm_90` (`sm_90a` when [`GpuTarget::arch_specific`]).
    pub fn real_arch(&self) -> String {
        format!("sm_{}{}", self.sm, self.suffix())
    }
}

/// Shared memory the system keeps for itself per resident block (sm_80 and later).
pub const RESERVED_SHARED_PER_BLOCK: u32 = 1024;

/// Tile levels of a spatial index: block, virtual thread, thread, register 1, register 2.
pub const SPATIAL_LEVELS: usize = 5;
/// Tile levels of a reduction index: outer (one shared-memory stage per step), middle, inner.
pub const REDUCTION_LEVELS: usize = 3;
/// Most accumulators (output elements) one thread may hold. A thread has at most 255
/// registers on sm_90; with 129–256 accumulators ptxas spilled in over half of the sampled
/// configurations (and NVRTC took 2 s each), with at most 128 in under a fifth.
pub const MAX_ACCUMULATORS: usize = 128;
/// Values of the `unroll` knob (Ansor's `auto_unroll_max_step`).
pub const UNROLL_STEPS: [i64; 4] = [0, 16, 64, 512];
/// Values of the `vector` knob: the widest cooperative load, in floats.
pub const VECTOR_WIDTHS: [i64; 3] = [1, 2, 4];
/// Values of the `lanes` knob: threads sharing one output's reduction.
pub const LANES: [i64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
/// Most blocks in the (one-dimensional) grid.
pub const MAX_BLOCKS: usize = (1 << 31) - 1;
/// Bound on the virtual-thread level (TVM's `max_vthread_extent`).
pub const MAX_VTHREAD: u64 = 8;
/// Bound on each register level and on the inner reduction level (Ansor's
/// `max_innermost_split_factor`).
pub const MAX_REGISTER_PART: u64 = 64;

/// How one index is tiled: its padded extent and the factors of it, outermost first
/// (`[block, vthread, thread, reg1, reg2]` for a spatial index, `[outer, middle, inner]`
/// for a reduction index).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AxisSplit {
    pub padded: usize,
    pub factors: Vec<usize>,
}

/// A register-level loop, named by its index id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegLoop {
    /// The reg1 level of a spatial index.
    Reg1(usize),
    /// The inner level of a reduction index.
    Inner(usize),
    /// The reg2 level of a spatial index.
    Reg2(usize),
}

/// One point of the GPU schedule space. Build one with [`default_schedule`] or
/// [`GpuTemplate::decode`]; check a foreign one (e.g. from a cache) with
/// [`GpuSchedule::validate`] and [`GpuSchedule::check_limits`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSchedule {
    /// Per index id (spatial first, then reduction, as in [`Kernel::indices`]).
    pub axes: Vec<AxisSplit>,
    /// Threads sharing one output's reduction (a power of two; 1 without a reduction).
    pub lanes: usize,
    /// Per access of [`stageable_accesses`]: staged in shared memory.
    pub stage: Vec<bool>,
    /// Widest cooperative load, in floats (1, 2 or 4).
    pub vector: usize,
    /// `#pragma unroll` on loops of at most this many iterations (0: none).
    pub unroll_max_step: usize,
    /// The register-level loops, outermost first: every [`register_loops`] item once.
    pub order: Vec<RegLoop>,
    /// The SIMT GEMM form of the schedule (see [`super::gpu_simt`]): when present, the
    /// kernel is computed as an implicit GEMM with these tiles, and the Ansor fields above
    /// are the trivial split ([`simt_schedule`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simt: Option<SimtGemm>,
    /// The row template's knobs, for a kernel of several stages (see
    /// [`super::rows::RowsGpuSpace`]): when present, the kernel is generated by the row
    /// template with them and the fields above are unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<super::rows::RowsGpuConfig>,
}

/// A staged input tile: the bounding box of an access's coordinates over one block's
/// spatial ranges and one outer step of the reduction (with the halo of affine accesses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tile {
    pub access: Access,
    /// The box's extent per tensor dimension.
    pub dims: Vec<usize>,
    /// Per dimension, the box's corner minus the coordinate at the ranges' corner
    /// (`sum` of `coef * (span - 1)` over negative coefficients; 0 or less).
    pub shift: Vec<i64>,
    /// Whether the tile depends on a reduction index with more than one outer step (so it
    /// is reloaded every step; otherwise it is loaded once).
    pub per_step: bool,
}

/// The padded extent of a spatial index: `e` rounded up to a multiple of the largest power
/// of two `g ≤ e / 8` (at most 64), so padding wastes at most 1/8 and the padded extent has
/// `g` as a factor (1000 → 1024, 1021 → 1024, 100 → 104, 17 → 18; below 16 nothing changes).
pub fn padded_extent(e: usize) -> usize {
    let e = e.max(1);
    let g = if e < 16 {
        1
    } else {
        let q = e / 8;
        (1usize << (usize::BITS - 1 - q.leading_zeros())).min(64)
    };
    e.div_ceil(g) * g
}

/// Whether the body is provably 0 at points where reduction index `r` is past its extent,
/// given that every access with a plain `r` dimension then reads 0 (it is outside that
/// tensor). Only then may `r` be padded.
pub fn pads_to_zero(kernel: &Kernel, r: usize) -> bool {
    fn zero(e: &Expr, r: usize) -> bool {
        match e {
            Expr::Lit(v) => *v == 0.0,
            Expr::Output | Expr::Temp(_) => false,
            Expr::Access(a) => a.dims.iter().any(|d| d.as_var() == Some(r)),
            Expr::Neg(a) => zero(a, r),
            Expr::Bin(BinOp::Mul, a, b) => zero(a, r) || zero(b, r),
            Expr::Bin(BinOp::Add | BinOp::Sub, a, b) => zero(a, r) && zero(b, r),
            Expr::Bin(BinOp::Div, _, _) => false,
            Expr::Call(
                Func::Relu
                | Func::Gelu
                | Func::Tanh
                | Func::Sqrt
                | Func::Abs
                | Func::Erf
                | Func::Silu,
                args,
            ) => args.iter().all(|a| zero(a, r)),
            Expr::Call(Func::Max | Func::Min, args) => args.iter().all(|a| zero(a, r)),
            Expr::Call(Func::Exp | Func::Sigmoid | Func::Log | Func::Pow | Func::Rsqrt, _) => false,
        }
    }
    kernel.kind == BodyKind::Sum && zero(&kernel.body, r)
}

/// The padded extent of every index: spatial ones by [`padded_extent`], reduction ones
/// only where [`pads_to_zero`] allows.
pub fn padded_extents(kernel: &Kernel, extents: &[usize]) -> Vec<usize> {
    (0..kernel.indices.len())
        .map(|i| {
            let e = extents.get(i).copied().unwrap_or(1).max(1);
            match kernel.indices[i].kind {
                IndexKind::Spatial => padded_extent(e),
                IndexKind::Reduction if pads_to_zero(kernel, i) => padded_extent(e),
                IndexKind::Reduction => e,
            }
        })
        .collect()
}

/// The input accesses of the main statement that may be staged in shared memory: distinct,
/// of rank ≥ 1, in order of first appearance. [`GpuSchedule::stage`] follows this order.
pub fn stageable_accesses(kernel: &Kernel) -> Vec<Access> {
    let mut out: Vec<Access> = Vec::new();
    kernel.body.visit_accesses(&mut |a| {
        if !a.dims.is_empty() && !out.contains(a) {
            out.push(a.clone());
        }
    });
    out
}

/// The register-level loops in item order (the `order` knob permutes these): reg1 of every
/// spatial index, inner of every reduction index, reg2 of every spatial index. This order
/// is Ansor's and the default.
pub fn register_loops(kernel: &Kernel) -> Vec<RegLoop> {
    let spatial = kernel.spatial();
    let reduction = if kernel.kind == BodyKind::Sum {
        kernel.reduction()
    } else {
        Vec::new()
    };
    spatial
        .iter()
        .map(|&s| RegLoop::Reg1(s))
        .chain(reduction.iter().map(|&r| RegLoop::Inner(r)))
        .chain(spatial.iter().map(|&s| RegLoop::Reg2(s)))
        .collect()
}

/// Whether some stageable access could use vector loads (its last dimension is a plain
/// index of even extent); only then does the space have a `vector` knob.
fn vectorizable(kernel: &Kernel, extents: &[usize]) -> bool {
    stageable_accesses(kernel).iter().any(|a| {
        a.dims
            .last()
            .and_then(|d| d.as_var())
            .is_some_and(|v| extents.get(v).is_some_and(|e| e.is_multiple_of(2)))
    })
}

fn product(xs: impl IntoIterator<Item = usize>) -> usize {
    xs.into_iter().fold(1usize, |a, b| a.saturating_mul(b))
}

fn round16(bytes: usize) -> usize {
    bytes.saturating_add(15) / 16 * 16
}

impl GpuSchedule {
    fn factor(&self, index: usize, level: usize) -> usize {
        self.axes
            .get(index)
            .and_then(|a| a.factors.get(level))
            .copied()
            .unwrap_or(1)
    }

    /// Blocks along index `i` (outer reduction steps for a reduction index).
    pub fn outer(&self, i: usize) -> usize {
        self.factor(i, 0)
    }

    /// Index `i`'s extent in one block's tile: `vthread × thread × reg1 × reg2` for a
    /// spatial index, `middle × inner` (one outer step) for a reduction index.
    pub fn span(&self, i: usize) -> usize {
        self.axes
            .get(i)
            .map_or(1, |a| product(a.factors.iter().skip(1).copied()))
    }

    /// Threads along spatial index `s`.
    pub fn thread(&self, s: usize) -> usize {
        self.factor(s, 2)
    }

    /// Accumulators along spatial index `s`: `vthread × reg1 × reg2`.
    pub fn registers(&self, s: usize) -> usize {
        product([self.factor(s, 1), self.factor(s, 3), self.factor(s, 4)])
    }

    /// Threads that each compute a different part of the output (threads / lanes).
    pub fn thread_groups(&self, kernel: &Kernel) -> usize {
        product(kernel.spatial().iter().map(|&s| self.thread(s)))
    }

    /// The GEMM form of the kernel at the extents this schedule splits (for a SIMT
    /// schedule).
    pub fn gemm(&self, kernel: &Kernel) -> Option<GemmForm> {
        let extents: Vec<usize> = self.axes.iter().map(|a| a.padded).collect();
        gemm_form(kernel, &extents)
    }

    /// Threads per block.
    pub fn threads(&self, kernel: &Kernel) -> usize {
        if let Some(t) = &self.simt {
            return t.threads();
        }
        self.thread_groups(kernel).saturating_mul(self.lanes)
    }

    /// Blocks in the grid.
    pub fn blocks(&self, kernel: &Kernel) -> usize {
        if let Some(t) = &self.simt {
            return self.gemm(kernel).map_or(usize::MAX, |g| t.blocks(&g));
        }
        product(kernel.spatial().iter().map(|&s| self.outer(s)))
    }

    /// Accumulators (output elements) per thread.
    pub fn accumulators(&self, kernel: &Kernel) -> usize {
        if let Some(t) = &self.simt {
            return t.accumulators();
        }
        product(kernel.spatial().iter().map(|&s| self.registers(s)))
    }

    /// Iterations of the middle reduction loops together (what the lanes share).
    pub fn middle_points(&self, kernel: &Kernel) -> usize {
        if kernel.kind != BodyKind::Sum {
            return 1;
        }
        product(kernel.reduction().iter().map(|&r| self.factor(r, 1)))
    }

    /// The staged tiles, in [`stageable_accesses`] order.
    pub fn tiles(&self, kernel: &Kernel) -> Vec<Tile> {
        let reducing = kernel.kind == BodyKind::Sum;
        stageable_accesses(kernel)
            .into_iter()
            .zip(&self.stage)
            .filter(|(_, &staged)| staged)
            .map(|(access, _)| {
                let mut dims = Vec::new();
                let mut shift = Vec::new();
                let mut per_step = false;
                for map in &access.dims {
                    let mut extent: i64 = 1;
                    let mut sh: i64 = 0;
                    for &(v, c) in &map.terms {
                        let span = self.span(v) as i64 - 1;
                        extent = extent.saturating_add(c.saturating_abs().saturating_mul(span));
                        if c < 0 {
                            sh = sh.saturating_add(c.saturating_mul(span));
                        }
                        if reducing
                            && kernel.indices[v].kind == IndexKind::Reduction
                            && self.outer(v) > 1
                        {
                            per_step = true;
                        }
                    }
                    dims.push(extent.max(1) as usize);
                    shift.push(sh);
                }
                Tile {
                    access,
                    dims,
                    shift,
                    per_step,
                }
            })
            .collect()
    }

    /// Floats of the cross-warp lane sum (only with more than 32 lanes).
    pub fn lane_scratch(&self, kernel: &Kernel) -> usize {
        if self.lanes <= 32 {
            0
        } else {
            product([
                self.accumulators(kernel),
                self.thread_groups(kernel),
                self.lanes / 32,
            ])
        }
    }

    /// Static shared memory per block, bytes: every staged tile (each 16-byte aligned) and
    /// the cross-warp lane sum.
    pub fn shared_bytes(&self, kernel: &Kernel) -> usize {
        if let Some(t) = &self.simt {
            return self.gemm(kernel).map_or(usize::MAX, |g| t.shared_bytes(&g));
        }
        let tiles = self
            .tiles(kernel)
            .iter()
            .map(|t| round16(product(t.dims.iter().copied()).saturating_mul(4)))
            .fold(0usize, usize::saturating_add);
        tiles.saturating_add(round16(self.lane_scratch(kernel).saturating_mul(4)))
    }

    /// Checks the schedule fits the kernel at these extents: every index split in the right
    /// number of factors whose product is its padded extent (at least the extent; a
    /// reduction index padded only where [`pads_to_zero`]), lanes a power of two (1 without
    /// a reduction), one staging flag per [`stageable_accesses`] entry, a vector width of
    /// 1, 2 or 4, and an order listing every [`register_loops`] item once.
    pub fn validate(&self, kernel: &Kernel, extents: &[usize]) -> Result<(), String> {
        if let Some(rows) = &self.rows {
            if !kernel.is_staged() {
                return Err("row template knobs on a one-statement kernel".into());
            }
            rows.validate()?;
        }
        if extents.len() != kernel.indices.len() || self.axes.len() != kernel.indices.len() {
            return Err(format!(
                "the kernel has {} indices but the schedule splits {} and {} extents were given",
                kernel.indices.len(),
                self.axes.len(),
                extents.len()
            ));
        }
        let reducing = kernel.kind == BodyKind::Sum;
        for (i, (axis, &e)) in self.axes.iter().zip(extents).enumerate() {
            let name = &kernel.indices[i].name;
            let spatial = kernel.indices[i].kind == IndexKind::Spatial;
            let levels = if spatial {
                SPATIAL_LEVELS
            } else {
                REDUCTION_LEVELS
            };
            if axis.factors.len() != levels {
                return Err(format!(
                    "index `{name}` needs {levels} tile factors, got {:?}",
                    axis.factors
                ));
            }
            if axis.factors.contains(&0) || product(axis.factors.iter().copied()) != axis.padded {
                return Err(format!(
                    "the factors {:?} of index `{name}` do not multiply to its padded extent {}",
                    axis.factors, axis.padded
                ));
            }
            if axis.padded < e.max(1) {
                return Err(format!(
                    "index `{name}` is padded to {} below its extent {e}",
                    axis.padded
                ));
            }
            if !spatial && axis.padded != e && !(reducing && pads_to_zero(kernel, i)) {
                return Err(format!(
                    "reduction index `{name}` cannot be padded: a padded point would not add 0"
                ));
            }
        }
        if !self.lanes.is_power_of_two() {
            return Err(format!("lanes must be a power of two, got {}", self.lanes));
        }
        if self.lanes > 1 && (!reducing || kernel.reduction().is_empty()) {
            return Err("lanes > 1 needs a reduction".into());
        }
        let stageable = stageable_accesses(kernel).len();
        if self.stage.len() != stageable {
            return Err(format!(
                "{} staging flags for {stageable} stageable accesses",
                self.stage.len()
            ));
        }
        if ![1, 2, 4].contains(&self.vector) {
            return Err(format!(
                "vector width must be 1, 2 or 4, got {}",
                self.vector
            ));
        }
        if let Some(t) = &self.simt {
            if self
                .axes
                .iter()
                .zip(extents)
                .any(|(a, &e)| a.padded != e.max(1))
            {
                return Err("a SIMT GEMM schedule does not pad its indices".into());
            }
            let g = self
                .gemm(kernel)
                .ok_or("the kernel has no GEMM form (a product of two inputs summed)")?;
            t.check(&g)?;
        }
        let mut want = register_loops(kernel);
        let mut got = self.order.clone();
        want.sort_by_key(|l| format!("{l:?}"));
        got.sort_by_key(|l| format!("{l:?}"));
        if want != got {
            return Err(format!(
                "the loop order {:?} is not a permutation of {:?}",
                self.order,
                register_loops(kernel)
            ));
        }
        Ok(())
    }

    /// Checks the template's constraints on `target`: threads, accumulators, shared memory,
    /// blocks and lanes. The error names the first one broken.
    pub fn check_limits(&self, kernel: &Kernel, target: &GpuTarget) -> Result<(), String> {
        if let Some(rows) = &self.rows {
            // The row template's block: its threads and one float per warp of shared memory.
            let block = rows.block();
            if block > target.max_threads_per_block {
                return Err(format!(
                    "{block} threads per block (limit {})",
                    target.max_threads_per_block
                ));
            }
            return Ok(());
        }
        let threads = self.threads(kernel);
        if threads == 0 || threads > target.max_threads_per_block as usize {
            return Err(format!(
                "{threads} threads per block (limit {})",
                target.max_threads_per_block
            ));
        }
        let acc = self.accumulators(kernel);
        if acc > MAX_ACCUMULATORS {
            return Err(format!(
                "{acc} accumulators per thread (limit {MAX_ACCUMULATORS})"
            ));
        }
        let shared = self.shared_bytes(kernel);
        if shared > target.max_shared_per_block as usize {
            return Err(format!(
                "{shared} bytes of shared memory (limit {})",
                target.max_shared_per_block
            ));
        }
        if self.simt.as_ref().is_some_and(|t| t.pipeline >= 2) && target.sm < 80 {
            return Err(format!(
                "cp.async needs sm_80 or later (the target is sm_{})",
                target.sm
            ));
        }
        let blocks = self.blocks(kernel);
        if blocks > MAX_BLOCKS {
            return Err(format!("{blocks} blocks (limit {MAX_BLOCKS})"));
        }
        if self.simt.is_none() && self.lanes > self.middle_points(kernel) {
            return Err(format!(
                "{} lanes for {} middle reduction iterations",
                self.lanes,
                self.middle_points(kernel)
            ));
        }
        Ok(())
    }
}

/// The largest divisor of `n` that is at most `cap` (at least 1).
fn divisor_at_most(n: usize, cap: usize) -> usize {
    (1..=cap.min(n).max(1))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1)
}

fn prev_pow2(n: usize) -> usize {
    if n == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// The schedule used without tuning. A sound heuristic, valid for every kernel and shape:
///
/// * a reducing kernel's last two output axes get 16 × 16 threads (one axis: 256), further
///   axes what is left of 256 threads; each thread computes a 4 × 4 (large outputs) or
///   2 × 2 (medium) register tile. An elementwise kernel gives its last axis up to 256
///   threads (coalesced) and computes one element per thread;
/// * the reduction is staged 16 deep (the innermost reduction indices first), and every
///   input that some block-tiled output index does not appear in (so its tile is reused
///   by several threads) is staged in shared memory with float4 loads where provable;
/// * a rank-0 output, or few outputs with a long reduction, spread the reduction over up to
///   256 (rank 0) or 32 lanes per output;
/// * `unroll_max_step` 64, Ansor's register-loop order.
///
/// It then shrinks the staging depth (and finally unstages tiles) until the shared memory
/// fits the target.
pub fn default_schedule(kernel: &Kernel, extents: &[usize], target: &GpuTarget) -> GpuSchedule {
    let mut s = match gemm_form(kernel, extents) {
        Some(g) => simt_schedule(kernel, extents, SimtGemm::analytic(&g, target)),
        None => ansor_default_schedule(kernel, extents, target),
    };
    if kernel.is_staged() {
        // A kernel of several stages: the row template's heuristic knobs.
        s.rows = super::rows::RowPlan::new(kernel, extents)
            .ok()
            .map(|plan| super::rows::RowsGpuConfig::heuristic(&plan));
    }
    s
}

/// The default of the Ansor multi-level tiling space (what [`default_schedule`] returns for
/// kernels without a GEMM form; for one with, a valid schedule of the Ansor form that the
/// template's space does not offer).
pub fn ansor_default_schedule(
    kernel: &Kernel,
    extents: &[usize],
    target: &GpuTarget,
) -> GpuSchedule {
    let padded = padded_extents(kernel, extents);
    let spatial = kernel.spatial();
    let reducing = kernel.kind == BodyKind::Sum && !kernel.reduction().is_empty();
    let reduction = if reducing {
        kernel.reduction()
    } else {
        Vec::new()
    };
    let ext = |i: usize| extents.get(i).copied().unwrap_or(1).max(1);
    let spatial_points = product(spatial.iter().map(|&s| ext(s)));
    let red_points = product(reduction.iter().map(|&r| ext(r)));
    let sms = target.sm_count.max(1) as usize;
    let max_threads = (target.max_threads_per_block as usize).max(1);

    let mut lanes = if !reducing {
        1
    } else if spatial.is_empty() {
        prev_pow2(red_points).min(256)
    } else if spatial_points <= sms * 32 && red_points >= 256 {
        32
    } else {
        1
    };
    lanes = lanes.min(prev_pow2(max_threads));

    let reg = if !reducing || lanes > 1 {
        1
    } else if spatial_points >= sms * 256 * 16 {
        4
    } else if spatial_points >= sms * 256 * 4 {
        2
    } else {
        1
    };
    let mut axes: Vec<AxisSplit> = padded
        .iter()
        .map(|&p| AxisSplit {
            padded: p,
            factors: Vec::new(),
        })
        .collect();
    let mut budget = (256usize.min(max_threads) / lanes).max(1);
    for (n, &s) in spatial.iter().enumerate().rev() {
        let p = padded[s];
        let last_two = n + 2 >= spatial.len();
        let r = divisor_at_most(p, if last_two { reg } else { 1 });
        // A reducing kernel's threads form a square (16 x 16) for reuse of the staged
        // tiles; an elementwise one's line up along the last axis for coalescing.
        let t_cap = if reducing && last_two && spatial.len() >= 2 {
            budget.min(16)
        } else {
            budget
        };
        let t = divisor_at_most(p / r, t_cap);
        budget = (budget / t).max(1);
        axes[s].factors = vec![p / (r * t), 1, t, 1, r];
    }
    let mut depth = if lanes > 1 { lanes * 4 } else { 16 };
    for &r in reduction.iter().rev() {
        let p = padded[r];
        let m = divisor_at_most(p, depth);
        depth = (depth / m).max(1);
        axes[r].factors = vec![p / m, m, 1];
    }
    let mut schedule = GpuSchedule {
        axes,
        lanes,
        stage: Vec::new(),
        vector: if vectorizable(kernel, extents) { 4 } else { 1 },
        unroll_max_step: 64,
        order: register_loops(kernel),
        simt: None,
        rows: None,
    };
    let middle = schedule.middle_points(kernel);
    if schedule.lanes > middle {
        schedule.lanes = prev_pow2(middle);
    }
    schedule.stage = stageable_accesses(kernel)
        .iter()
        .map(|a| {
            reducing
                && spatial.iter().any(|&s| {
                    schedule.span(s) > 1
                        && !a.dims.iter().any(|d| d.terms.iter().any(|&(v, _)| v == s))
                })
        })
        .collect();
    // Fit the shared memory: shallower stages first, then fewer staged tiles.
    let limit = target.max_shared_per_block as usize;
    while schedule.shared_bytes(kernel) > limit {
        let deepest = reduction
            .iter()
            .copied()
            .filter(|&r| schedule.axes[r].factors[1] > 1)
            .max_by_key(|&r| schedule.axes[r].factors[1]);
        if let Some(r) = deepest {
            let p = schedule.axes[r].padded;
            let m = divisor_at_most(p, schedule.axes[r].factors[1] / 2);
            schedule.axes[r].factors = vec![p / m, m, 1];
            let middle = schedule.middle_points(kernel);
            if schedule.lanes > middle {
                schedule.lanes = prev_pow2(middle);
            }
            continue;
        }
        let tiles = schedule.tiles(kernel);
        let biggest = stageable_accesses(kernel)
            .iter()
            .enumerate()
            .filter(|(n, _)| schedule.stage[*n])
            .max_by_key(|(_, a)| {
                tiles
                    .iter()
                    .find(|t| &t.access == *a)
                    .map_or(0, |t| product(t.dims.iter().copied()))
            })
            .map(|(n, _)| n);
        match biggest {
            Some(n) => schedule.stage[n] = false,
            None => break,
        }
    }
    schedule
}

/// Knob ids of a template's space.
#[derive(Debug)]
struct Layout {
    kernel: Kernel,
    extents: Vec<usize>,
    padded: Vec<usize>,
    target: GpuTarget,
    /// Per index id, its `tile.<name>` knob.
    tiles: Vec<usize>,
    lanes: Option<usize>,
    /// Per stageable access, its `stage.<tensor>` knob.
    stage: Vec<usize>,
    vector: Option<usize>,
    unroll: usize,
    order: Option<usize>,
    items: Vec<RegLoop>,
    knob_count: usize,
    /// The SIMT GEMM space's knobs, for a kernel in GEMM form (the Ansor knobs are then
    /// absent).
    simt: Option<SimtKnobs>,
}

/// The knobs of the SIMT GEMM space, in [`SimtKnobs::NAMES`] order (`kfuse` only for a
/// kernel with several reduction indices).
#[derive(Debug)]
struct SimtKnobs {
    form: GemmForm,
    /// Knob ids of `bm, bn, bk, tm, tn, warp_m, unroll, vector, pipeline, raster, split`
    /// and, when present, `kfuse`.
    ids: Vec<usize>,
}

impl SimtKnobs {
    const NAMES: [&'static str; 12] = [
        "bm", "bn", "bk", "tm", "tn", "warp_m", "unroll", "vector", "pipeline", "raster", "split",
        "kfuse",
    ];
    const LISTS: [&'static [i64]; 12] = [
        &super::gpu_simt::BLOCK_TILES,
        &super::gpu_simt::BLOCK_TILES,
        &super::gpu_simt::K_TILES,
        &super::gpu_simt::THREAD_TILES,
        &super::gpu_simt::THREAD_TILES,
        &super::gpu_simt::WARP_M,
        &super::gpu_simt::UNROLLS,
        &super::gpu_simt::VECTORS,
        &super::gpu_simt::PIPELINES,
        &super::gpu_simt::RASTERS,
        &super::gpu_simt::SPLITS,
        &super::gpu_simt::K_FUSE,
    ];

    /// How many of the knobs a kernel of this form has.
    fn count(form: &GemmForm) -> usize {
        if form.fused.is_some() {
            Self::NAMES.len()
        } else {
            Self::NAMES.len() - 1
        }
    }

    fn decode(&self, c: &Config) -> Result<SimtGemm, String> {
        let mut v = [0usize; 12];
        for (n, (&k, list)) in self.ids.iter().zip(Self::LISTS).enumerate() {
            v[n] = c
                .index(k)
                .and_then(|i| list.get(i).copied())
                .ok_or_else(|| format!("the config has no valid `{}` value", Self::NAMES[n]))?
                as usize;
        }
        Ok(SimtGemm {
            bm: v[0],
            bn: v[1],
            bk: v[2],
            tm: v[3],
            tn: v[4],
            warp_m: v[5],
            unroll: v[6],
            vector: v[7],
            pipeline: v[8],
            raster: v[9],
            split: v[10],
            kfuse: v[11] == 1,
        })
    }

    fn encode(&self, t: &SimtGemm) -> Result<Vec<Value>, String> {
        let v = [
            t.bm,
            t.bn,
            t.bk,
            t.tm,
            t.tn,
            t.warp_m,
            t.unroll,
            t.vector,
            t.pipeline,
            t.raster,
            t.split,
            usize::from(t.kfuse),
        ];
        if t.kfuse && self.ids.len() < Self::NAMES.len() {
            return Err("kfuse on a kernel with one reduction index".into());
        }
        v.iter()
            .zip(Self::LISTS)
            .zip(Self::NAMES)
            .take(self.ids.len())
            .map(|((&x, list), name)| {
                list.iter()
                    .position(|&y| y == x as i64)
                    .map(Value::Discrete)
                    .ok_or_else(|| format!("{name} {x} is not a value of the knob"))
            })
            .collect()
    }
}

/// The schedule that computes `kernel` as a SIMT GEMM with tiles `t`: the Ansor fields
/// hold the trivial split (every index one block-level factor of its extent, no lanes, no
/// staging).
pub fn simt_schedule(kernel: &Kernel, extents: &[usize], t: SimtGemm) -> GpuSchedule {
    let axes = (0..kernel.indices.len())
        .map(|i| {
            let e = extents.get(i).copied().unwrap_or(1).max(1);
            let levels = match kernel.indices[i].kind {
                IndexKind::Spatial => SPATIAL_LEVELS,
                IndexKind::Reduction => REDUCTION_LEVELS,
            };
            let mut factors = vec![1; levels];
            factors[0] = e;
            AxisSplit { padded: e, factors }
        })
        .collect();
    GpuSchedule {
        axes,
        lanes: 1,
        stage: vec![false; stageable_accesses(kernel).len()],
        vector: 1,
        unroll_max_step: 0,
        order: register_loops(kernel),
        simt: Some(t),
        rows: None,
    }
}

impl Layout {
    /// The product over spatial indices of their tile factors at `levels`, read straight
    /// from the config.
    fn spatial_product(&self, c: &Config, levels: &[usize]) -> usize {
        self.kernel.spatial().iter().fold(1usize, |acc, &s| {
            let f = c.factors(self.tiles[s]).unwrap_or(&[]);
            levels.iter().fold(acc, |a, &l| {
                a.saturating_mul(f.get(l).map_or(1, |&x| x as usize))
            })
        })
    }

    /// The config's lanes (1 without the knob).
    fn lanes_of(&self, c: &Config) -> usize {
        self.lanes
            .and_then(|k| c.index(k))
            .and_then(|i| LANES.get(i))
            .map_or(1, |&v| v as usize)
    }

    /// The config's middle reduction iterations (1 without a reduction).
    fn middle_of(&self, c: &Config) -> usize {
        if self.kernel.kind != BodyKind::Sum {
            return 1;
        }
        self.kernel.reduction().iter().fold(1usize, |a, &r| {
            let f = c.factors(self.tiles[r]).unwrap_or(&[]);
            a.saturating_mul(f.get(1).map_or(1, |&x| x as usize))
        })
    }

    fn decode(&self, c: &Config) -> Result<GpuSchedule, String> {
        if let Some(k) = &self.simt {
            return Ok(simt_schedule(&self.kernel, &self.extents, k.decode(c)?));
        }
        let bad = |what: &str| format!("the config has no valid `{what}` value");
        let mut axes = Vec::new();
        for (i, &k) in self.tiles.iter().enumerate() {
            let f = c.factors(k).ok_or_else(|| bad("tile"))?;
            let factors: Vec<usize> = f.iter().map(|&x| x as usize).collect();
            axes.push(AxisSplit {
                padded: self.padded[i],
                factors,
            });
        }
        let pick = |knob: Option<usize>, list: &[i64], default: i64, what: &str| match knob {
            None => Ok(default),
            Some(k) => c
                .index(k)
                .and_then(|i| list.get(i).copied())
                .ok_or_else(|| bad(what)),
        };
        let lanes = pick(self.lanes, &LANES, 1, "lanes")? as usize;
        let vector = pick(self.vector, &VECTOR_WIDTHS, 1, "vector")? as usize;
        let unroll = pick(Some(self.unroll), &UNROLL_STEPS, 0, "unroll")? as usize;
        let stage = self
            .stage
            .iter()
            .map(|&k| c.index(k).map(|i| i == 1).ok_or_else(|| bad("stage")))
            .collect::<Result<Vec<bool>, String>>()?;
        let order = match self.order {
            None => self.items.clone(),
            Some(k) => c
                .permutation(k)
                .ok_or_else(|| bad("order"))?
                .iter()
                .map(|&n| self.items.get(n).copied().ok_or_else(|| bad("order")))
                .collect::<Result<Vec<RegLoop>, String>>()?,
        };
        Ok(GpuSchedule {
            axes,
            lanes,
            stage,
            vector,
            unroll_max_step: unroll,
            order,
            simt: None,
            rows: None,
        })
    }

    fn encode(&self, s: &GpuSchedule) -> Result<Config, String> {
        s.validate(&self.kernel, &self.extents)?;
        match (&self.simt, &s.simt) {
            (Some(k), Some(t)) => return Ok(Config::new(k.encode(t)?)),
            (Some(_), None) => {
                return Err("this kernel's GPU space is the SIMT GEMM template's".into())
            }
            (None, Some(_)) => return Err("this kernel has no GEMM form".into()),
            (None, None) => {}
        }
        let mut values: Vec<Option<Value>> = vec![None; self.knob_count];
        for (i, &k) in self.tiles.iter().enumerate() {
            let axis = &s.axes[i];
            if axis.padded != self.padded[i] {
                return Err(format!(
                    "index `{}` is padded to {}, the template pads it to {}",
                    self.kernel.indices[i].name, axis.padded, self.padded[i]
                ));
            }
            values[k] = Some(Value::Factorization(
                axis.factors.iter().map(|&f| f as u64).collect(),
            ));
        }
        let position = |list: &[i64], v: usize, what: &str| {
            list.iter()
                .position(|&x| x == v as i64)
                .ok_or_else(|| format!("{what} {v} is not a value of the knob"))
        };
        match self.lanes {
            Some(k) => values[k] = Some(Value::Discrete(position(&LANES, s.lanes, "lanes")?)),
            None if s.lanes != 1 => return Err("this kernel has no lanes knob".into()),
            None => {}
        }
        for (&k, &on) in self.stage.iter().zip(&s.stage) {
            values[k] = Some(Value::Discrete(usize::from(on)));
        }
        if let Some(k) = self.vector {
            values[k] = Some(Value::Discrete(position(
                &VECTOR_WIDTHS,
                s.vector,
                "vector",
            )?));
        }
        values[self.unroll] = Some(Value::Discrete(position(
            &UNROLL_STEPS,
            s.unroll_max_step,
            "unroll_max_step",
        )?));
        if let Some(k) = self.order {
            let perm = s
                .order
                .iter()
                .map(|l| {
                    self.items
                        .iter()
                        .position(|x| x == l)
                        .ok_or_else(|| format!("loop {l:?} is not a register loop"))
                })
                .collect::<Result<Vec<usize>, String>>()?;
            values[k] = Some(Value::Permutation(perm));
        } else if s.order != self.items {
            return Err("this kernel has a single register-loop order".into());
        }
        let values = values
            .into_iter()
            .collect::<Option<Vec<Value>>>()
            .ok_or("internal: a knob got no value")?;
        Ok(Config::new(values))
    }
}

/// A C-identifier-safe part of a knob name: the name itself when it is ASCII, else `#id`.
fn knob_part(name: &str, id: usize) -> String {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        name.to_string()
    } else {
        format!("{id}")
    }
}

/// The GPU schedule space of one kernel at concrete extents on one target.
#[derive(Debug, Clone)]
pub struct GpuTemplate {
    layout: Arc<Layout>,
    space: SearchSpace,
    /// The row template's space, for a kernel of several stages of the row form: then
    /// the template's space is this one.
    rows: Option<super::rows::RowsGpuSpace>,
}

impl GpuTemplate {
    /// The space for `kernel` at `extents` (from [`crate::ir::bind`]) on `target`.
    ///
    /// Errors: extents that do not fit the kernel (count, zero, beyond 2^32).
    ///
    /// A kernel of several stages of the row form gets the row template's space
    /// ([`super::rows::RowsGpuSpace`]: threads per row, rows per block).
    pub fn new(
        kernel: &Kernel,
        extents: &[usize],
        target: &GpuTarget,
    ) -> Result<GpuTemplate, String> {
        let mut t = Self::einsum(kernel, extents, target)?;
        if kernel.is_staged() {
            if let Ok(rows) = super::rows::RowsGpuSpace::new(kernel, extents) {
                t.space = rows.space().clone();
                t.rows = Some(rows);
            }
        }
        Ok(t)
    }

    fn einsum(
        kernel: &Kernel,
        extents: &[usize],
        target: &GpuTarget,
    ) -> Result<GpuTemplate, String> {
        if extents.len() != kernel.indices.len() {
            return Err(format!(
                "{} extents for the {} indices of `{}`",
                extents.len(),
                kernel.indices.len(),
                kernel.name
            ));
        }
        if let Some(i) = extents.iter().position(|&e| e == 0) {
            return Err(format!("index `{}` has extent 0", kernel.indices[i].name));
        }
        let padded = padded_extents(kernel, extents);
        if let Some(form) = gemm_form(kernel, extents) {
            return Self::simt(kernel, extents, padded, target, form);
        }
        let reducing = kernel.kind == BodyKind::Sum && !kernel.reduction().is_empty();
        let mut b = SearchSpace::builder();
        let mut tiles = Vec::new();
        for (i, index) in kernel.indices.iter().enumerate() {
            let name = format!("tile.{}", knob_part(&index.name, i));
            let p = padded[i] as u64;
            let knob = match index.kind {
                IndexKind::Spatial => Factorization::new(p, SPATIAL_LEVELS)
                    .with_max_part(1, MAX_VTHREAD)
                    .with_max_part(2, u64::from(target.max_threads_per_block.max(1)))
                    .with_max_part(3, MAX_REGISTER_PART)
                    .with_max_part(4, MAX_REGISTER_PART),
                // Only `+=` kernels have reduction indices.
                IndexKind::Reduction => {
                    Factorization::new(p, REDUCTION_LEVELS).with_max_part(2, MAX_REGISTER_PART)
                }
            };
            tiles.push(b.add(&name, knob));
        }
        let lanes = reducing.then(|| b.add("lanes", Discrete::new(LANES)));
        let accesses = stageable_accesses(kernel);
        let mut stage = Vec::new();
        let mut used: Vec<String> = Vec::new();
        for a in &accesses {
            let base = format!(
                "stage.{}",
                knob_part(&kernel.params[a.tensor].name, a.tensor)
            );
            let mut name = base.clone();
            let mut n = 1;
            while used.contains(&name) {
                name = format!("{base}.{n}");
                n += 1;
            }
            used.push(name.clone());
            stage.push(b.add(&name, Discrete::new([0, 1])));
        }
        let vector =
            vectorizable(kernel, extents).then(|| b.add("vector", Discrete::new(VECTOR_WIDTHS)));
        let unroll = b.add("unroll", Discrete::new(UNROLL_STEPS));
        let items = register_loops(kernel);
        let order = (items.len() >= 2).then(|| b.add("order", Permutation::new(items.len())));
        let knob_count = b_count(&tiles, lanes, &stage, vector, unroll, order);
        let layout = Arc::new(Layout {
            kernel: kernel.clone(),
            extents: extents.to_vec(),
            padded,
            target: target.clone(),
            tiles,
            lanes,
            stage,
            vector,
            unroll,
            order,
            items,
            knob_count,
            simt: None,
        });
        // The cheap, selective checks first, straight from the knob values: constraints run
        // on every sampled point.
        let max_threads = target.max_threads_per_block as usize;
        let l = Arc::clone(&layout);
        b.constraint(
            &format!("accumulators per thread <= {MAX_ACCUMULATORS}"),
            move |c| l.spatial_product(c, &[1, 3, 4]) <= MAX_ACCUMULATORS,
        );
        let l = Arc::clone(&layout);
        b.constraint(&format!("threads per block <= {max_threads}"), move |c| {
            let threads = l.spatial_product(c, &[2]).saturating_mul(l.lanes_of(c));
            (1..=max_threads).contains(&threads)
        });
        let l = Arc::clone(&layout);
        b.constraint(&format!("blocks <= {MAX_BLOCKS}"), move |c| {
            l.spatial_product(c, &[0]) <= MAX_BLOCKS
        });
        let l = Arc::clone(&layout);
        b.constraint("lanes <= middle reduction iterations", move |c| {
            l.lanes_of(c) <= l.middle_of(c)
        });
        let l = Arc::clone(&layout);
        let max_shared = target.max_shared_per_block as usize;
        b.constraint(
            &format!("shared memory per block <= {max_shared} bytes"),
            move |c| {
                l.decode(c)
                    .is_ok_and(|s| s.shared_bytes(&l.kernel) <= max_shared)
            },
        );
        // Many spatial indices make valid points rare (the accumulator bound is a product
        // over them): draw longer before giving up.
        b.max_tries(200_000);
        let space = b.build().map_err(|e| e.to_string())?;
        Ok(GpuTemplate {
            layout,
            space,
            rows: None,
        })
    }

    /// The SIMT GEMM space of a kernel in GEMM form.
    fn simt(
        kernel: &Kernel,
        extents: &[usize],
        padded: Vec<usize>,
        target: &GpuTarget,
        form: GemmForm,
    ) -> Result<GpuTemplate, String> {
        let mut b = SearchSpace::builder();
        let mut ids = Vec::new();
        for (name, list) in SimtKnobs::NAMES
            .iter()
            .zip(SimtKnobs::LISTS)
            .take(SimtKnobs::count(&form))
        {
            ids.push(b.add(name, Discrete::new(list.to_vec())));
        }
        let knob_count = ids.len();
        let layout = Arc::new(Layout {
            kernel: kernel.clone(),
            extents: extents.to_vec(),
            padded,
            target: target.clone(),
            tiles: Vec::new(),
            lanes: None,
            stage: Vec::new(),
            vector: None,
            unroll: 0,
            order: None,
            items: register_loops(kernel),
            knob_count,
            simt: Some(SimtKnobs { form, ids }),
        });
        let l = Arc::clone(&layout);
        b.constraint(
            "SIMT GEMM: 64 to 1024 threads in whole warps tiling the block, whole load rounds, \
             float4 only where provable, splits of whole k-tiles, tables that fit",
            move |c| match &l.simt {
                Some(k) => k.decode(c).is_ok_and(|t| t.check(&k.form).is_ok()),
                None => false,
            },
        );
        let l = Arc::clone(&layout);
        let max_shared = target.max_shared_per_block as usize;
        let max_threads = target.max_threads_per_block as usize;
        let sm = target.sm;
        b.constraint(
            &format!(
                "shared memory per block <= {max_shared} bytes, threads <= {max_threads}, \
                 cp.async on sm_80+"
            ),
            move |c| match &l.simt {
                Some(k) => k.decode(c).is_ok_and(|t| {
                    t.shared_bytes(&k.form) <= max_shared
                        && t.threads() <= max_threads
                        && (t.pipeline == 0 || sm >= 80)
                }),
                None => false,
            },
        );
        let space = b.build().map_err(|e| e.to_string())?;
        Ok(GpuTemplate {
            layout,
            space,
            rows: None,
        })
    }

    /// The search space.
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }

    /// The padded extent of every index (what the `tile.*` knobs factor).
    pub fn padded(&self) -> &[usize] {
        &self.layout.padded
    }

    /// The schedule a point of the space stands for.
    ///
    /// Errors: a config that does not fit the space (the message names the knob or
    /// constraint).
    pub fn decode(&self, config: &Config) -> Result<GpuSchedule, String> {
        if let Some(rows) = &self.rows {
            let mut s = self.default_schedule();
            s.rows = Some(rows.decode(config)?);
            return Ok(s);
        }
        self.space.check(config).map_err(|e| e.to_string())?;
        self.layout.decode(config)
    }

    /// The point of the space a schedule stands for.
    ///
    /// Errors: a schedule for another kernel, shape or padding, or one that breaks a
    /// constraint.
    pub fn encode(&self, schedule: &GpuSchedule) -> Result<Config, String> {
        if let Some(rows) = &self.rows {
            let cfg = schedule
                .rows
                .ok_or("not a schedule of the row template (no `rows` knobs)")?;
            return rows
                .encode(&cfg)
                .ok_or_else(|| format!("{cfg:?} is not in the row template's space"));
        }
        let c = self.layout.encode(schedule)?;
        self.space.check(&c).map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// [`default_schedule`] for this kernel, shape and target.
    pub fn default_schedule(&self) -> GpuSchedule {
        default_schedule(
            &self.layout.kernel,
            &self.layout.extents,
            &self.layout.target,
        )
    }

    /// The point of [`default_schedule`](Self::default_schedule).
    pub fn default_config(&self) -> Result<Config, String> {
        self.encode(&self.default_schedule())
    }
}

/// The number of knobs (they are numbered in the order they were added).
fn b_count(
    tiles: &[usize],
    lanes: Option<usize>,
    stage: &[usize],
    vector: Option<usize>,
    unroll: usize,
    order: Option<usize>,
) -> usize {
    tiles
        .iter()
        .copied()
        .chain(lanes)
        .chain(stage.iter().copied())
        .chain(vector)
        .chain([unroll])
        .chain(order)
        .max()
        .map_or(0, |m| m + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn padding_wastes_at_most_an_eighth() {
        for (e, p) in [
            (1, 1),
            (13, 13),
            (17, 18),
            (64, 64),
            (100, 104),
            (1000, 1024),
            (1021, 1024),
        ] {
            assert_eq!(padded_extent(e), p, "{e}");
        }
        for e in 1..5000 {
            let p = padded_extent(e);
            assert!(p >= e && (p - e) * 8 <= e, "{e} -> {p}");
        }
    }

    #[test]
    fn reductions_are_padded_only_where_a_padded_point_adds_zero() {
        for (src, zero) in [
            ("o[[i]] += a[[i, k]] * b[[k]]", true),
            ("o[[i]] += a[[i + k]] * w[[k]]", true),
            ("o[[i]] += relu(a[[i, k]]) - a[[i, k]]", true),
            ("o[[i]] += a[[i, k]] + 1.0", false),
            ("o[[i]] += exp(a[[i, k]])", false),
            ("o[[i]] += a[[i + k]] + w[[k]]", false),
            ("o[[i]] += a[[i, k]] / b[[k]]", false),
        ] {
            let k = parse_text("k", src, None).unwrap();
            assert_eq!(pads_to_zero(&k, 1), zero, "{src}");
        }
    }

    #[test]
    fn defaults_round_trip_and_every_space_samples() {
        let target = GpuTarget::h100();
        let mut rng = StdRng::seed_from_u64(3);
        for (src, extents) in [
            ("c[[i, j]] += a[[i, k]] * b[[k, j]]", vec![1021, 7, 1000]),
            ("s[[]] += a[[i]] * b[[i]]", vec![1_000_000]),
            ("o[[]] = a[[]] * 2.0", vec![]),
            ("d[[i]] = a[[i, i]]", vec![33]),
            ("o[[i, j, l, m]] = a[[i, j, l, m]]", vec![64, 3, 64, 17]),
            // SIMT GEMM spaces: split-K, float4, a fused reduction's tables.
            ("c[[i, j]] += a[[i, k]] * b[[k, j]]", vec![512, 64, 1024]),
            (
                "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]",
                vec![1, 64, 112, 112, 3, 7, 7],
            ),
            (
                "y[[n, p, q, f]] += x[[n, p + r - 1, q + s - 1, c]] * w[[r, s, c, f]]",
                vec![8, 14, 14, 256, 256, 3, 3],
            ),
        ] {
            let k = parse_text("k", src, None).unwrap();
            let t = GpuTemplate::new(&k, &extents, &target).unwrap();
            let s = default_schedule(&k, &extents, &target);
            assert!(s.validate(&k, &extents).is_ok(), "{src}");
            assert!(s.check_limits(&k, &target).is_ok(), "{src}");
            assert_eq!(t.decode(&t.default_config().unwrap()).unwrap(), s, "{src}");
            for _ in 0..5 {
                let c = t.space().sample_uniform(&mut rng).unwrap();
                let d = t.decode(&c).unwrap();
                assert!(d.check_limits(&k, &target).is_ok(), "{src}");
                assert_eq!(t.encode(&d).unwrap(), c, "{src}");
            }
        }
    }

    #[test]
    fn foreign_schedules_are_rejected() {
        let k = parse_text("k", "o[[i]] += a[[i, k]] + 1.0", None).unwrap();
        let extents = [8, 13];
        let mut s = default_schedule(&k, &extents, &GpuTarget::h100());
        assert!(s.validate(&k, &extents).is_ok());
        // `+ 1.0` would be summed at padded points: k must not be padded.
        s.axes[1] = AxisSplit {
            padded: 16,
            factors: vec![1, 16, 1],
        };
        assert!(s
            .validate(&k, &extents)
            .unwrap_err()
            .contains("cannot be padded"));
        s.axes[1] = AxisSplit {
            padded: 13,
            factors: vec![13, 1],
        };
        assert!(s.validate(&k, &extents).is_err());
        let src = crate::codegen::cuda::generate(&k, &extents, &[&[8, 13], &[8]], &s);
        assert!(src.source.starts_with("#error"));
    }
}

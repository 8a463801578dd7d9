//! The Hopper (`sm_90a`) view of a tensor-core GEMM: warpgroup MMAs
//! (`wgmma.mma_async.m64nNk16`, f16/bf16 in, f32 accumulators) reading both operands from
//! shared memory through matrix descriptors, and the shared-memory layouts those
//! descriptors describe.
//!
//! A block is `warpgroups` warpgroups of 128 threads stacked along `m`, each computing
//! `wg_m × block_n` (one or two `m64` instructions per 16-deep step, `N = block_n`). Each
//! operand's stage is stored in a **canonical layout** of the PTX ISA ("Shared Memory
//! Matrix Layout"), swizzled, in the orientation the operand has in global memory (so the
//! copies are straight 16-byte chunks):
//!
//! * K-major (k contiguous, `imm-trans = 0`): rows of `W` bytes (`W` = the swizzle: 128 B for
//!   64-deep stages, 64 B for 32-deep ones), 8 rows an atom, atoms of 8 rows `SBO = 8W`
//!   apart; a stage deeper than `W` is several such panels one after another;
//! * MN-major (m or n contiguous, `imm-trans = 1`): rows of k, each `W = 128` bytes of 64
//!   m or n; 8 k rows an atom (`SBO = 8W` between them), panels of 64 columns
//!   `LBO = depth · W` apart.
//!
//! Inside every `8 × W` atom the 16-byte chunks are XOR-swizzled by the shared address:
//! bits `[4, 4 + log2(W/16))` ^= bits `[7, 7 + log2(W/16))` (`Swizzle<3,4,3>` for 128 B).
//! Stages start at 1024-byte boundaries (the kernel rounds its dynamic shared memory up),
//! so the descriptors' base offset is 0 and a 16-deep step inside a K-major atom is the
//! start address plus 32 bytes. [`SmemLayout`] computes the same bytes the emulator's
//! descriptor decoder (`tests/cuda_emu_sm90.h`) reads; the unit tests check the two
//! descriptions agree element by element.
//!
//! With TMA ([`WgSchedule::tma`]) the same layouts are what a tiled tensor map with that
//! swizzle writes: a K-major operand's stage is one box (`block_k` × rows), an MN-major
//! one's a box per 64-column panel (64 × `block_k`); [`tensor_maps`] gives the maps.
//!
//! ```
//! use tensor_dsl::lower::wgmma::{SmemLayout, WgSchedule};
//! let s = WgSchedule { wg_m: 64, warpgroups: 2, block_n: 128, block_k: 64, stages: 4, splits: 1, tma: false };
//! assert_eq!((s.block_m(), s.threads(), s.accumulators()), (128, 256, 64));
//! let a = SmemLayout { k_major: true, rows: 128, depth: 64 };
//! assert_eq!((a.swizzle(), a.sbo(), a.mode()), (128, 1024, 1));
//! let bt = SmemLayout { k_major: false, rows: 128, depth: 64 };
//! assert_eq!((bt.lbo(), bt.sbo()), (64 * 128, 1024));
//! ```

use crate::codegen::tensor_map::TensorMapSpec;
use crate::ir::Kernel;
use crate::lower::tensorcore::{Gemm, Operand};
use serde::{Deserialize, Serialize};

/// One point of the wgmma template, decoded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WgSchedule {
    /// Rows of one warpgroup's tile: 64 or 128 (one or two `m64` MMAs per step).
    pub wg_m: usize,
    /// Warpgroups of a block, along `m`.
    pub warpgroups: usize,
    /// Columns of the block tile: the `N` of every `wgmma` (a multiple of 16, ≤ 256).
    pub block_n: usize,
    /// Depth of one pipeline stage: 32 or 64.
    pub block_k: usize,
    /// Shared-memory stages.
    pub stages: usize,
    /// Blocks splitting one output tile's reduction (split-K across blocks).
    pub splits: usize,
    /// Operands staged by the tensor memory accelerator (one thread issues
    /// `cp.async.bulk.tensor` copies of whole boxes from `CUtensorMap`s the runtime builds,
    /// completing on an mbarrier per stage) rather than by every thread's `cp.async`.
    #[serde(default)]
    pub tma: bool,
}

impl WgSchedule {
    /// Threads per block.
    pub fn threads(&self) -> usize {
        128 * self.warpgroups
    }

    /// Rows of the block tile.
    pub fn block_m(&self) -> usize {
        self.wg_m * self.warpgroups
    }

    /// `m64` MMAs per warpgroup and 16-deep step.
    pub fn m_blocks(&self) -> usize {
        self.wg_m / 64
    }

    /// `f32` accumulators per thread.
    pub fn accumulators(&self) -> usize {
        self.m_blocks() * self.block_n / 2
    }

    /// wgmma groups left in flight at the end of an iteration (`wgmma.wait_group`): 1 with
    /// three stages or more, so the tensor cores run on while the next stage is waited for.
    pub fn wait_depth(&self) -> usize {
        usize::from(self.stages >= 3)
    }

    /// k tiles copied ahead of the one being multiplied: every stage not being read by a
    /// wgmma in flight.
    pub fn prefetch(&self) -> usize {
        self.stages - 1 - self.wait_depth()
    }

    /// The shared-memory layout of A's (`a`) or B's stage.
    pub fn layout(&self, a: bool, k_major: bool) -> SmemLayout {
        SmemLayout {
            k_major,
            rows: if a { self.block_m() } else { self.block_n },
            depth: self.block_k,
        }
    }

    /// Checks the rules the code relies on.
    pub fn validate(&self) -> Result<(), String> {
        let ok = matches!(self.wg_m, 64 | 128)
            && matches!(self.warpgroups, 1 | 2)
            && self.block_n >= 64
            && self.block_n <= 256
            && self.block_n.is_power_of_two()
            && matches!(self.block_k, 32 | 64)
            && self.stages >= 2
            && self.splits >= 1;
        if ok {
            Ok(())
        } else {
            Err(format!("not a valid wgmma schedule: {self:?}"))
        }
    }
}

/// One operand's stage in shared memory, in a canonical (swizzled) wgmma layout: `rows` of
/// `m` or `n` by `depth` of `k`, K-major or MN-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmemLayout {
    /// `k` is contiguous (else `m`/`n` is).
    pub k_major: bool,
    /// Extent along `m` or `n` (a multiple of 64).
    pub rows: usize,
    /// Extent along `k` (32 or 64).
    pub depth: usize,
}

impl SmemLayout {
    /// Bytes of one stage.
    pub fn bytes(&self) -> usize {
        2 * self.rows * self.depth
    }

    /// The swizzle width, bytes: one row of an atom (128, 64 or 32).
    pub fn swizzle(&self) -> usize {
        let contiguous = if self.k_major { self.depth } else { self.rows };
        (2 * contiguous).min(128)
    }

    /// Elements in one row of an atom.
    fn per_row(&self) -> usize {
        self.swizzle() / 2
    }

    /// The descriptor's swizzle mode: 1 (128 B), 2 (64 B), 3 (32 B).
    pub fn mode(&self) -> u64 {
        match self.swizzle() {
            128 => 1,
            64 => 2,
            _ => 3,
        }
    }

    /// Leading dimension byte offset: between panels of an MN-major layout; unused by a
    /// swizzled K-major one (encoded as 1, as the PTX ISA assumes).
    pub fn lbo(&self) -> usize {
        if self.k_major {
            16
        } else {
            self.depth * self.swizzle()
        }
    }

    /// Stride dimension byte offset: between atoms of 8 rows (K-major) or 8 k (MN-major).
    pub fn sbo(&self) -> usize {
        8 * self.swizzle()
    }

    /// The byte offset of element `(row, k)` before the swizzle.
    pub fn linear(&self, row: usize, k: usize) -> usize {
        let (w, per) = (self.swizzle(), self.per_row());
        if self.k_major {
            k / per * self.rows * w + row * w + k % per * 2
        } else {
            row / per * self.depth * w + k * w + row % per * 2
        }
    }

    /// The swizzle of a byte offset from a 1024-byte boundary.
    pub fn swizzled(&self, offset: usize) -> usize {
        let mask = self.swizzle() / 16 - 1;
        offset ^ (((offset >> 7) & mask) << 4)
    }

    /// Where element `(row, k)` is, bytes from the stage's start.
    pub fn offset(&self, row: usize, k: usize) -> usize {
        self.swizzled(self.linear(row, k))
    }

    /// The start address of the `m64` (A) or `N`-row (B) block at `row` for the 16-deep
    /// step at `k`, bytes from the stage's start (the descriptor's start address minus the
    /// stage's).
    pub fn start(&self, row: usize, k: usize) -> usize {
        self.linear(row, k)
    }

    /// The descriptor's fields other than the start address: `(lbo >> 4) << 16 |
    /// (sbo >> 4) << 32 | mode << 62`.
    pub fn descriptor_bits(&self) -> u64 {
        let lbo = if self.k_major {
            1
        } else {
            (self.lbo() >> 4) as u64
        };
        (lbo << 16) | (((self.sbo() >> 4) as u64) << 32) | (self.mode() << 62)
    }

    /// The whole descriptor of a block starting at shared address `start`.
    pub fn descriptor(&self, start: usize) -> u64 {
        self.descriptor_bits() | (((start & 0x3ffff) >> 4) as u64)
    }
}

/// One operand's TMA copies per stage: the map's dimensions are the contiguous group, the
/// other group, then the batch indices by growing stride; `coords` says which kernel-side
/// coordinate each dimension takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmaOperand {
    /// The map (see [`TensorMapSpec`]).
    pub spec: TensorMapSpec,
    /// The coordinate of each dimension: `Row` (the operand's m or n), `K`, or a batch
    /// index (by kernel index id).
    pub coords: Vec<TmaCoord>,
    /// Boxes per stage (64-column panels of an MN-major operand; 1 for a K-major one), each
    /// `panel_bytes` after the previous in shared memory and 64 rows further.
    pub boxes: usize,
    pub panel_bytes: usize,
}

/// What a tensor-map coordinate is, kernel side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmaCoord {
    Row,
    K,
    Batch(usize),
}

fn tma_operand(
    kernel: &Kernel,
    g: &Gemm,
    s: &WgSchedule,
    a: bool,
    op: &Operand,
) -> Result<TmaOperand, String> {
    let name = if a { "A" } else { "B" };
    if !op.linear || op.width != 8 {
        return Err(format!(
            "{name}'s rows are not 16-byte aligned (TMA needs strides of 16 bytes)"
        ));
    }
    let layout = s.layout(a, op.k_major);
    let rows = if a { g.m_extent } else { g.n_extent };
    let mut dims = vec![];
    let mut strides = vec![];
    let mut boxes = vec![];
    let mut coords = vec![];
    if op.k_major {
        dims.extend([g.k_extent as u64, rows as u64]);
        strides.push(2 * op.row_stride as u64);
        boxes.extend([s.block_k as u32, layout.rows as u32]);
        coords.extend([TmaCoord::K, TmaCoord::Row]);
    } else {
        dims.extend([rows as u64, g.k_extent as u64]);
        strides.push(2 * op.k_stride as u64);
        boxes.extend([64, s.block_k as u32]);
        coords.extend([TmaCoord::Row, TmaCoord::K]);
    }
    let side = if a { 0 } else { 1 };
    let mut batch: Vec<(usize, usize, usize)> = g
        .batch
        .iter()
        .zip(&g.batch_extents)
        .zip(&g.batch_strides)
        .map(|((&v, &e), st)| (st[side], e, v))
        .collect();
    batch.sort_unstable();
    for (stride, extent, v) in batch {
        dims.push(extent as u64);
        strides.push(2 * stride as u64);
        boxes.push(1);
        coords.push(TmaCoord::Batch(v));
    }
    let spec = TensorMapSpec {
        input: kernel
            .inputs()
            .iter()
            .position(|&p| p == op.param)
            .ok_or("the operand is not an input")?,
        dtype: g.dtype,
        dims,
        strides,
        boxes,
        swizzle: layout.swizzle() as u32,
    };
    spec.validate()
        .map_err(|e| format!("{name} has no tensor map: {e}"))?;
    let (count, panel_bytes) = if op.k_major {
        (1, 0)
    } else {
        (layout.rows / 64, layout.depth * layout.swizzle())
    };
    Ok(TmaOperand {
        spec,
        coords,
        boxes: count,
        panel_bytes,
    })
}

/// The TMA copies of A and B for `s`, or why TMA cannot stage them: both operands with
/// 16-byte aligned strides that grow outwards (the driver's tiled maps).
pub fn tensor_maps(kernel: &Kernel, g: &Gemm, s: &WgSchedule) -> Result<[TmaOperand; 2], String> {
    Ok([
        tma_operand(kernel, g, s, true, &g.a)?,
        tma_operand(kernel, g, s, false, &g.b)?,
    ])
}

/// The shared address of element `(row, k)` of the matrix descriptor `desc` describes, per
/// the PTX ISA's canonical layouts (the emulator's decoder, written independently of
/// [`SmemLayout`]): what the unit tests compare [`SmemLayout::offset`] with.
pub fn descriptor_element(desc: u64, row: usize, k: usize, mn_major: bool) -> usize {
    let start = ((desc & 0x3fff) << 4) as usize;
    let lbo = (((desc >> 16) & 0x3fff) << 4) as usize;
    let sbo = (((desc >> 32) & 0x3fff) << 4) as usize;
    let width = match desc >> 62 {
        1 => 128,
        2 => 64,
        3 => 32,
        _ => 0,
    };
    let t = 8;
    let addr = match (mn_major, width) {
        (false, 0) => start + row % 8 * 16 + row / 8 * sbo + k % t * 2 + k / t * lbo,
        (false, w) => start + row % 8 * w + row / 8 * sbo + k * 2,
        (true, 0) => start + row % t * 2 + row / t * sbo + k % 8 * 16 + k / 8 * lbo,
        (true, w) => start + row % (w / 2) * 2 + row / (w / 2) * lbo + k % 8 * w + k / 8 * sbo,
    };
    if width == 0 {
        addr
    } else {
        addr ^ (((addr >> 7) & (width / 16 - 1)) << 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element a descriptor reaches is where the layout stored it, for every step and
    /// block the kernel addresses, in every layout the template makes; and the layout is a
    /// permutation of the stage's bytes (16-byte chunks stay whole).
    #[test]
    fn descriptors_reach_what_the_layout_stores() {
        for k_major in [true, false] {
            for rows in [64, 128, 256] {
                for depth in [32, 64] {
                    let l = SmemLayout {
                        k_major,
                        rows,
                        depth,
                    };
                    // What a tiled tensor map with the layout's swizzle writes: boxes of
                    // (inner x outer) elements, rows of inner ones, swizzled on the address.
                    let (inner, panels) = if k_major { (depth, 1) } else { (64, rows / 64) };
                    for q in 0..panels {
                        let start = q * depth * l.swizzle() * usize::from(!k_major);
                        for r in 0..(if k_major { rows } else { depth }) {
                            for c in 0..inner {
                                let tma = l.swizzled(start + (r * inner + c) * 2);
                                let (row, k) = if k_major { (r, c) } else { (q * 64 + c, r) };
                                assert_eq!(tma, l.offset(row, k), "{l:?} TMA box {q}");
                            }
                        }
                    }
                    let base = 3 * 1024 * 16; // a stage start: a 1024-byte boundary
                                              // A blocks of 64 rows, or the whole of B.
                    for (r0, n) in [(0, 64), (rows - 64, 64), (0, rows)] {
                        for k0 in (0..depth).step_by(16) {
                            let d = l.descriptor(base + l.start(r0, k0));
                            for r in 0..n {
                                for k in 0..16 {
                                    assert_eq!(
                                        descriptor_element(d, r, k, !k_major),
                                        base + l.offset(r0 + r, k0 + k),
                                        "{l:?} block {r0} step {k0} element ({r}, {k})"
                                    );
                                }
                            }
                        }
                    }
                    let mut seen = vec![false; l.bytes() / 2];
                    for r in 0..rows {
                        for k in 0..depth {
                            let o = l.offset(r, k);
                            assert!(o.is_multiple_of(2) && !seen[o / 2], "{l:?} ({r}, {k})");
                            seen[o / 2] = true;
                        }
                        let chunk = |k: usize| l.offset(r, k) / 16;
                        if k_major {
                            assert!((0..depth)
                                .step_by(8)
                                .all(|k| (k..k + 8).all(|x| chunk(x) == chunk(k))));
                        }
                    }
                }
            }
        }
    }
}

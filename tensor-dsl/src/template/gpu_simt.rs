//! The SIMT GEMM form of the GPU template: every kernel whose statement is a product of two
//! inputs summed over reduction indices (`c[[i, j]] += a[[i, k]] * b[[k, j]]`, batched
//! matmuls, convolutions, ...) is computed as an (implicit) GEMM `C[m, n] += A[m, k] · B[k, n]`
//! over fused axes — the output indices only `a` reads form `m`, those only `b` reads form
//! `n`, those both read are the batch — with the structure of a fast SGEMM. The knobs:
//!
//! * **block tile** `bm × bn`: one block computes a tile of `C` (and one batch element);
//! * **thread tile** `tm × tn` (4 or 8): a thread's register tile, made of 4 × 4 pieces
//!   strided across the block tile, so the compute loop reads conflict-free `float4`s from
//!   shared memory; register loops are always fully unrolled;
//! * **warp tile** `warp_m`: the threads of a warp form `warp_m × (32 / warp_m)`, so a warp
//!   computes `warp_m·tm × (32 / warp_m)·tn` outputs (its pieces strided like the thread's);
//! * **k-tile** `bk` and **reduction fusion** `kfuse`: the reduction is walked in `bk`-deep
//!   tiles (the hot loop, unrolled `unroll` times). With `kfuse = 0` the longest reduction
//!   index both operands read is tiled and the others (a convolution's `r, s`) are loops
//!   around it, with each thread's addresses and padding checks set up once per iteration of
//!   them. With `kfuse = 1` every reduction index is fused into one `k` (`c·r·s`, the implicit
//!   GEMM of cuDNN/CUTLASS): an operand whose fused indices are consecutive plain dimensions
//!   is addressed linearly, any other (a convolution's input) through a per-block table in
//!   shared memory of each `k` point's offset and a bit mask of the window positions it
//!   needs, checked against the thread's row in one instruction — what a short reduction
//!   such as a first 7×7 layer with 3 channels needs;
//! * **pipeline**: `0` loads the next tile into registers while the current one is
//!   computed, then stores it to the other of two shared buffers (one barrier per tile);
//!   `2`–`4` is a `cp.async` pipeline of that many shared stages (16-byte
//!   `cp.async.cg` where a `float4` is aligned, else 4-byte `cp.async.ca`; zero-fill at the
//!   edges, `commit_group`/`wait_group`; sm_80 and later, `f32` operands);
//! * **vector** `4`: `float4` global loads (and 16-byte copies) where the operand's
//!   contiguous axis and its extents prove alignment — along `k` for a k-major operand
//!   (`a[[i, k]]`, NHWC inputs), along the fused rows for the other (`b[[k, j]]`); an
//!   operand that cannot is loaded with scalar loads;
//! * **raster** `G`: the block index walks groups of `G` tile rows column by column, so
//!   neighbouring blocks share `A` and `B` tiles in L2;
//! * **split** (split-K across blocks): `split` blocks share an output tile, each a
//!   contiguous range of the outer reduction loops' iterations when there are at least as
//!   many (a convolution's `r, s`), else of the k-tiles (as equal as they divide); each writes its partial tile to a workspace (a module
//!   global), fences (`fence.acq_rel.gpu`), and counts itself in the tile's arrival counter;
//!   the last to arrive fences and sums the partials in split order (the same bits whatever
//!   the arrival order; every split's partials of a few accumulators loaded at once, so the
//!   sum costs a few trips to L2, not one per split),
//!   applies the epilogue, stores, and resets the counter for the next launch. Nobody waits
//!   for another block, so no launch order can deadlock. The workspace is at most
//!   [`MAX_WORKSPACE_BYTES`] per kernel and belongs to its loaded module: two launches of
//!   one module must not overlap (the CUDA runtime orders every launch on its one stream);
//!   a launch aborted halfway would leave counters behind.
//!
//! Shared tiles are k-major (`[bk][tile + 4]`): the 4-float padding keeps rows 16-byte
//! aligned for the compute loop's `float4` reads and spreads the copies' stores over the
//! banks (see [`bank_conflicts`]). Edge tiles are predicated (reads outside read 0, stores
//! are guarded), a reduction that `bk` does not divide puts its partial tile first (zero
//! filled, in the prologue), so every shape runs; epilogues run on the accumulators before
//! the one store.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::gpu_simt::{gemm_form, SimtGemm};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let g = gemm_form(&k, &[512, 64, 1024]).unwrap();
//! assert_eq!((g.m, g.n, g.k, g.batch), (512, 64, 1024, 1));
//! let s = SimtGemm::analytic(&g, &tensor_dsl::template::gpu::GpuTarget::h100());
//! assert!(s.check(&g).is_ok());
//! // 8 output tiles cannot fill 132 SMs: the default splits the reduction across blocks.
//! assert!(s.split > 1);
//! ```

use crate::ir::{Access, BinOp, BodyKind, DType, Expr, Kernel};
use crate::template::gpu::GpuTarget;
use serde::{Deserialize, Serialize};

/// Values of the block tile knobs `bm`, `bn`.
pub const BLOCK_TILES: [i64; 4] = [32, 64, 128, 256];
/// Values of the `bk` knob (the hot loop's depth).
pub const K_TILES: [i64; 3] = [8, 16, 32];
/// Values of the thread tile knobs `tm`, `tn`.
pub const THREAD_TILES: [i64; 2] = [4, 8];
/// Values of the `warp_m` knob: threads of a warp along `m`.
pub const WARP_M: [i64; 4] = [2, 4, 8, 16];
/// Values of the `unroll` knob: unroll factor of the hot (k-tile) loop.
pub const UNROLLS: [i64; 2] = [1, 2];
/// Values of the `vector` knob: widest global load, floats.
pub const VECTORS: [i64; 2] = [1, 4];
/// Values of the `pipeline` knob: 0 = register prefetch into two shared buffers, else the
/// stages of a `cp.async` pipeline.
pub const PIPELINES: [i64; 4] = [0, 2, 3, 4];
/// Values of the `raster` knob: tile rows per group of the block order (1 = row by row).
pub const RASTERS: [i64; 4] = [1, 4, 8, 16];
/// Values of the `split` knob: blocks sharing one output tile's reduction (split-K).
pub const SPLITS: [i64; 5] = [1, 2, 4, 8, 16];
/// Values of the `kfuse` knob: 1 fuses every reduction index into the tiled one.
pub const K_FUSE: [i64; 2] = [0, 1];
/// Padding of a shared row, floats (keeps rows 16-byte aligned, shifts banks).
pub const SHARED_PAD: usize = 4;
/// Fewest threads per block.
pub const MIN_THREADS: usize = 64;
/// Most floats a thread stages in registers per tile with the register-prefetch pipeline
/// (beyond this the accumulators, fragments and staging do not fit 255 registers).
pub const MAX_STAGED_PER_THREAD: usize = 32;
/// Largest split-K workspace (partial tiles) of one kernel, bytes.
pub const MAX_WORKSPACE_BYTES: usize = 32 << 20;
/// Largest fused-reduction table (per table operand, 8 bytes a point), bytes.
pub const MAX_TABLE_BYTES: usize = 16 * 1024;
/// Bits of a table entry's window mask available to the windows (bit 31 marks a row inside
/// the tensor, bit 30 is never set in a row's mask and marks points outside the reduction).
pub const TABLE_BITS: usize = 30;

/// One of the GEMM's two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The operand holding the `m` axes.
    A,
    /// The operand holding the `n` axes.
    B,
}

/// Every reduction index fused into one `k` (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedK {
    /// The fused indices, the last fastest.
    pub axes: Vec<usize>,
    /// Points of the fused reduction.
    pub k: usize,
}

/// How a kernel is a GEMM (see the module docs). Axes are index ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmForm {
    /// The operand holding the `m` axes.
    pub a: Access,
    /// The operand holding the `n` axes.
    pub b: Access,
    /// Element types of `a` and `b`.
    pub a_dtype: DType,
    pub b_dtype: DType,
    /// Output indices only `a` reads, in output order (fused, the last fastest).
    pub m_axes: Vec<usize>,
    /// Output indices only `b` reads.
    pub n_axes: Vec<usize>,
    /// Output indices both read.
    pub batch_axes: Vec<usize>,
    /// The reduction index walked in tiles (without `kfuse`).
    pub k_axis: usize,
    /// The other reduction indices (serial loops around the tiled one, without `kfuse`).
    pub outer_axes: Vec<usize>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    /// Iterations of the outer reduction loops together.
    pub outer: usize,
    /// Every index's extent (at least 1).
    pub extents: Vec<usize>,
    /// The fused reduction, when there are several reduction indices.
    pub fused: Option<FusedK>,
}

fn uses(acc: &Access, v: usize) -> bool {
    acc.dims.iter().any(|d| d.terms.iter().any(|t| t.0 == v))
}

/// The GEMM form of `kernel` at `extents`, if it has one: a `+=` statement whose body is
/// the product of two input accesses, every output index read by at least one of them,
/// some output index read only by each, and `m`, `n` of at least 16.
pub fn gemm_form(kernel: &Kernel, extents: &[usize]) -> Option<GemmForm> {
    if kernel.kind != BodyKind::Sum || extents.len() != kernel.indices.len() {
        return None;
    }
    let (a, b) = match &kernel.body {
        Expr::Bin(BinOp::Mul, x, y) => match (x.as_ref(), y.as_ref()) {
            (Expr::Access(a), Expr::Access(b)) => (a.clone(), b.clone()),
            _ => return None,
        },
        _ => return None,
    };
    let (mut m_axes, mut n_axes, mut batch_axes) = (Vec::new(), Vec::new(), Vec::new());
    for s in kernel.spatial() {
        match (uses(&a, s), uses(&b, s)) {
            (true, false) => m_axes.push(s),
            (false, true) => n_axes.push(s),
            (true, true) => batch_axes.push(s),
            (false, false) => return None,
        }
    }
    let reduction = kernel.reduction();
    if m_axes.is_empty() || n_axes.is_empty() || reduction.is_empty() {
        return None;
    }
    let ext = |i: usize| extents[i].max(1);
    // The tiled reduction index: the longest one both operands read, else the longest.
    let k_axis = reduction
        .iter()
        .copied()
        .max_by_key(|&r| (uses(&a, r) && uses(&b, r), ext(r), usize::MAX - r))?;
    let outer_axes: Vec<usize> = reduction.iter().copied().filter(|&r| r != k_axis).collect();
    let prod = |v: &[usize]| v.iter().map(|&i| ext(i)).product::<usize>();
    let fused = (reduction.len() >= 2).then(|| {
        let axes = fused_order(&a, &b, &reduction);
        FusedK {
            k: prod(&axes),
            axes,
        }
    });
    let g = GemmForm {
        m: prod(&m_axes),
        n: prod(&n_axes),
        k: ext(k_axis),
        batch: prod(&batch_axes),
        outer: prod(&outer_axes),
        a_dtype: kernel.params[a.tensor].dtype,
        b_dtype: kernel.params[b.tensor].dtype,
        a,
        b,
        m_axes,
        n_axes,
        batch_axes,
        k_axis,
        outer_axes,
        extents: extents.iter().map(|&e| e.max(1)).collect(),
        fused,
    };
    (g.m >= 16 && g.n >= 16 && g.m < (1 << 30) && g.n < (1 << 30)).then_some(g)
}

/// The dimensions of `acc` holding `axes` as plain indices, in `axes` order, if they are
/// consecutive plain dimensions of it in that order (then `axes` fused are addressed
/// linearly: the last's stride times the fused index) and appear nowhere else.
fn consecutive_plain(acc: &Access, axes: &[usize]) -> Option<Vec<usize>> {
    let dims: Vec<usize> = axes
        .iter()
        .map(|&v| acc.dims.iter().position(|d| d.as_var() == Some(v)))
        .collect::<Option<Vec<usize>>>()?;
    let consecutive = dims.windows(2).all(|w| w[1] == w[0] + 1);
    let elsewhere = acc
        .dims
        .iter()
        .enumerate()
        .any(|(d, m)| !dims.contains(&d) && m.terms.iter().any(|t| axes.contains(&t.0)));
    (consecutive && !elsewhere).then_some(dims)
}

/// The order of the fused reduction indices: the order of consecutive plain dimensions of
/// `b` (the weights of a convolution), else of `a`, else index order.
fn fused_order(a: &Access, b: &Access, reduction: &[usize]) -> Vec<usize> {
    for acc in [b, a] {
        let mut dims: Vec<(usize, usize)> = Vec::new();
        for &r in reduction {
            match acc.dims.iter().position(|d| d.as_var() == Some(r)) {
                Some(d) => dims.push((d, r)),
                None => break,
            }
        }
        if dims.len() == reduction.len() {
            dims.sort_unstable();
            let order: Vec<usize> = dims.into_iter().map(|(_, r)| r).collect();
            if consecutive_plain(acc, &order).is_some() {
                return order;
            }
        }
    }
    reduction.to_vec()
}

impl GemmForm {
    /// The access of one operand.
    pub fn access(&self, side: Side) -> &Access {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }

    /// The fused output axes of one operand (`m` or `n`).
    pub fn axes(&self, side: Side) -> &[usize] {
        match side {
            Side::A => &self.m_axes,
            Side::B => &self.n_axes,
        }
    }

    /// The fused output extent of one operand (`m` or `n`).
    pub fn extent(&self, side: Side) -> usize {
        match side {
            Side::A => self.m,
            Side::B => self.n,
        }
    }

    /// The element type of one operand.
    pub fn dtype(&self, side: Side) -> DType {
        match side {
            Side::A => self.a_dtype,
            Side::B => self.b_dtype,
        }
    }

    /// The tiled reduction indices (the last fastest), with or without fusion.
    pub fn k_axes(&self, fuse: bool) -> Vec<usize> {
        match (&self.fused, fuse) {
            (Some(f), true) => f.axes.clone(),
            _ => vec![self.k_axis],
        }
    }

    /// The reduction indices looped around the tiled ones.
    pub fn outer(&self, fuse: bool) -> Vec<usize> {
        if fuse && self.fused.is_some() {
            Vec::new()
        } else {
            self.outer_axes.clone()
        }
    }

    /// Points of the tiled reduction.
    pub fn k_len(&self, fuse: bool) -> usize {
        match (&self.fused, fuse) {
            (Some(f), true) => f.k,
            _ => self.k,
        }
    }

    /// Whether an operand is addressed linearly in the tiled reduction: its tiled indices
    /// are consecutive plain dimensions (one plain dimension without fusion) that no other
    /// dimension reads. Otherwise it reads the fused reduction through a table (with
    /// fusion) or checks and offsets per point (without).
    pub fn linear_k(&self, side: Side, fuse: bool) -> bool {
        consecutive_plain(self.access(side), &self.k_axes(fuse)).is_some()
    }

    /// Whether an operand needs a table of the fused reduction (with `kfuse`): it is not
    /// linear in it, or a dimension with a reduction index may leave the tensor (padding).
    pub fn table(&self, side: Side, fuse: bool) -> bool {
        fuse && self.fused.is_some() && {
            let acc = self.access(side);
            let k = self.k_axes(true);
            !self.linear_k(side, true)
                || acc
                    .dims
                    .iter()
                    .any(|d| d.as_var().is_none() && d.terms.iter().any(|t| k.contains(&t.0)))
        }
    }

    /// Bits of a table operand's window masks: per dimension with a reduction index that
    /// is not plain, the span of that dimension's reduction part.
    pub fn table_bits(&self, side: Side) -> usize {
        let Some(f) = &self.fused else { return 0 };
        self.access(side)
            .dims
            .iter()
            .filter(|d| d.as_var().is_none() && d.terms.iter().any(|t| f.axes.contains(&t.0)))
            .map(|d| {
                d.terms
                    .iter()
                    .filter(|t| f.axes.contains(&t.0))
                    .map(|&(v, c)| c.unsigned_abs() as usize * (self.extents[v] - 1))
                    .sum::<usize>()
                    + 1
            })
            .sum()
    }

    /// Whether the operand's tiled reduction is its fastest-varying dimension (it is loaded
    /// in runs along `k`; else along its fused rows). Table operands load along rows.
    pub fn k_fast(&self, side: Side, fuse: bool) -> bool {
        if self.table(side, fuse) {
            return false;
        }
        let acc = self.access(side);
        let k = self.k_axes(fuse);
        let axes = self.axes(side);
        let last = acc.dims.last();
        last.is_some_and(|m| m.terms.iter().any(|t| k.contains(&t.0)))
            && !last.is_some_and(|m| m.terms.iter().any(|t| axes.contains(&t.0)))
    }

    /// Whether `float4` loads along `k` are provably aligned: the operand is `f32`, linear
    /// in `k` with unit stride (its tiled indices are its last plain dimensions) and the
    /// tiled reduction's length is a multiple of 4 (then so is every other stride).
    pub fn vector_k(&self, side: Side, fuse: bool) -> bool {
        let acc = self.access(side);
        let k = self.k_axes(fuse);
        self.dtype(side) == DType::F32
            && !self.table(side, fuse)
            && consecutive_plain(acc, &k).is_some_and(|d| d.last() == Some(&(acc.dims.len() - 1)))
            && self.k_len(fuse).is_multiple_of(4)
    }

    /// Whether `float4` loads along the fused rows are provably aligned: the operand is
    /// `f32`, and its last fused axes are its last dimensions, plain, in order, with a
    /// product that is a multiple of 4 (groups of 4 rows are then contiguous and aligned).
    pub fn vector_rows(&self, side: Side) -> bool {
        let acc = self.access(side);
        let axes = self.axes(side);
        if self.dtype(side) != DType::F32 {
            return false;
        }
        let mut run = 1usize;
        let mut d = acc.dims.len();
        for &ax in axes.iter().rev() {
            if d == 0 || acc.dims[d - 1].as_var() != Some(ax) {
                break;
            }
            if acc
                .dims
                .iter()
                .filter(|m| m.terms.iter().any(|t| t.0 == ax))
                .count()
                != 1
            {
                break;
            }
            d -= 1;
            run = run.saturating_mul(self.extents[ax]);
        }
        d < acc.dims.len() && run.is_multiple_of(4)
    }

    /// Whether both operands are `f32` (what `cp.async` copies).
    pub fn f32_operands(&self) -> bool {
        self.a_dtype == DType::F32 && self.b_dtype == DType::F32
    }
}

/// How one operand's tile is loaded (see [`SimtGemm::plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandPlan {
    /// Loaded in runs along `k` (else along the fused rows).
    pub k_fast: bool,
    /// Elements per load (4: a `float4`).
    pub width: usize,
    /// Addressed through the fused reduction's table.
    pub table: bool,
    /// Copied with `cp.async`.
    pub asynchronous: bool,
    /// Load slots per thread per tile (each `width` elements).
    pub slots: usize,
}

/// One point of the SIMT GEMM space (see the module docs for each knob).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SimtGemm {
    /// Block tile along `m` and `n`.
    pub bm: usize,
    pub bn: usize,
    /// Depth of a reduction tile (one hot-loop iteration).
    pub bk: usize,
    /// Thread tile along `m` and `n` (4 or 8: one or two 4-wide pieces).
    pub tm: usize,
    pub tn: usize,
    /// Threads of a warp along `m` (the rest, `32 / warp_m`, along `n`).
    pub warp_m: usize,
    /// Unroll factor of the hot loop.
    pub unroll: usize,
    /// Widest global load, floats (1 or 4; 4 only where provably aligned).
    #[serde(default = "one")]
    pub vector: usize,
    /// 0: register prefetch into two shared buffers; 2–4: `cp.async` stages.
    #[serde(default)]
    pub pipeline: usize,
    /// Tile rows per group of the block order (1: row by row).
    #[serde(default = "one")]
    pub raster: usize,
    /// Blocks sharing one output tile's reduction.
    #[serde(default = "one")]
    pub split: usize,
    /// Every reduction index fused into the tiled one.
    #[serde(default)]
    pub kfuse: bool,
}

fn one() -> usize {
    1
}

fn blocks_of(x: usize, tile: usize) -> usize {
    x.div_ceil(tile.max(1))
}

impl SimtGemm {
    /// A schedule with these tiles and every other knob at its plain value (register
    /// prefetch, scalar loads, row order, no split, no fusion).
    pub fn tiles(bm: usize, bn: usize, bk: usize, tm: usize, tn: usize, warp_m: usize) -> Self {
        SimtGemm {
            bm,
            bn,
            bk,
            tm,
            tn,
            warp_m,
            unroll: 1,
            vector: 1,
            pipeline: 0,
            raster: 1,
            split: 1,
            kfuse: false,
        }
    }

    /// Threads along `m`, along `n`.
    pub fn thread_grid(&self) -> (usize, usize) {
        (self.bm / self.tm.max(1), self.bn / self.tn.max(1))
    }

    /// Threads per block.
    pub fn threads(&self) -> usize {
        let (a, b) = self.thread_grid();
        a * b
    }

    /// Output tiles per batch element: along `m`, along `n`.
    pub fn tile_grid(&self, g: &GemmForm) -> (usize, usize) {
        (blocks_of(g.m, self.bm), blocks_of(g.n, self.bn))
    }

    /// Output tiles of the whole launch (batch included).
    pub fn output_tiles(&self, g: &GemmForm) -> usize {
        let (tm, tn) = self.tile_grid(g);
        tm.saturating_mul(tn).saturating_mul(g.batch)
    }

    /// Blocks in the grid for `g`: every output tile `split` times.
    pub fn blocks(&self, g: &GemmForm) -> usize {
        self.output_tiles(g).saturating_mul(self.split.max(1))
    }

    /// Shared-memory stages: 2 buffers for register prefetch, else the pipeline's.
    pub fn stages(&self) -> usize {
        if self.pipeline == 0 {
            2
        } else {
            self.pipeline
        }
    }

    /// Whether the fused reduction is used (the knob, on a kernel that has one).
    pub fn fuses(&self, g: &GemmForm) -> bool {
        self.kfuse && g.fused.is_some()
    }

    /// k-tiles per outer reduction iteration (the partial one included).
    pub fn k_tiles(&self, g: &GemmForm) -> usize {
        blocks_of(g.k_len(self.fuses(g)), self.bk)
    }

    /// Whether the split divides the outer reduction loops (a convolution's `r, s`: when
    /// there are at least as many of their iterations as splits) rather than the k-tiles
    /// of each: then every split runs whole pipelines.
    pub fn splits_outer(&self, g: &GemmForm) -> bool {
        self.split > 1 && !self.fuses(g) && g.outer >= self.split
    }

    /// Most k-tiles of one split per outer iteration (split `z` takes tiles
    /// `z·kt/split .. (z+1)·kt/split`, or all of them when [`SimtGemm::splits_outer`]).
    pub fn tiles_per_split(&self, g: &GemmForm) -> usize {
        if self.splits_outer(g) {
            self.k_tiles(g)
        } else {
            blocks_of(self.k_tiles(g), self.split.max(1))
        }
    }

    /// Most outer reduction iterations of one split.
    pub fn outer_per_split(&self, g: &GemmForm) -> usize {
        let outer = if self.fuses(g) { 1 } else { g.outer.max(1) };
        if self.splits_outer(g) {
            blocks_of(outer, self.split)
        } else {
            outer
        }
    }

    /// Bytes of the fused-reduction tables (8 per point and table operand).
    pub fn table_bytes(&self, g: &GemmForm) -> usize {
        let fuse = self.fuses(g);
        let tables = [Side::A, Side::B]
            .iter()
            .filter(|&&s| g.table(s, fuse))
            .count();
        tables * self.k_tiles(g) * self.bk * 8
    }

    /// Static shared memory, bytes: the stages of both operands' k-major tiles and the
    /// fused reduction's tables.
    pub fn shared_bytes(&self, g: &GemmForm) -> usize {
        self.stages() * self.bk * (self.bm + SHARED_PAD + self.bn + SHARED_PAD) * 4
            + self.table_bytes(g)
    }

    /// Bytes of the split-K workspace (0 without a split).
    pub fn workspace_bytes(&self, g: &GemmForm) -> usize {
        if self.split <= 1 {
            0
        } else {
            self.blocks(g).saturating_mul(self.bm * self.bn * 4)
        }
    }

    /// Accumulators per thread.
    pub fn accumulators(&self) -> usize {
        self.tm * self.tn
    }

    /// Elements per thread per tile of `a` and of `b`.
    pub fn loads(&self) -> (usize, usize) {
        let t = self.threads().max(1);
        (self.bm * self.bk / t, self.bn * self.bk / t)
    }

    /// How an operand is loaded: `float4` runs along `k` for a k-major operand where
    /// [`GemmForm::vector_k`] proves them aligned, else along the fused rows (`float4`s of 4
    /// rows where [`GemmForm::vector_rows`] proves them aligned); 4-wide slots only where
    /// the tile is loaded in whole rounds of them.
    pub fn plan(&self, g: &GemmForm, side: Side) -> OperandPlan {
        let fuse = self.fuses(g);
        let table = g.table(side, fuse);
        let k_fast = g.k_fast(side, fuse);
        let tile = if side == Side::A { self.bm } else { self.bn };
        let t = self.threads().max(1);
        let provable = if k_fast {
            g.vector_k(side, fuse)
        } else {
            !table && g.vector_rows(side)
        };
        let width = if self.vector == 4 && provable && (tile * self.bk).is_multiple_of(4 * t) {
            4
        } else {
            1
        };
        OperandPlan {
            // Scalar loads go along rows whatever the layout: one row per thread, its `k`
            // offsets small constants (runs of 8 along `k` would give each thread several
            // rows, each its own address and guard); the L1 serves the rest of each sector.
            k_fast: k_fast && width == 4,
            width,
            table,
            asynchronous: self.pipeline >= 2,
            slots: tile * self.bk / (width * t),
        }
    }

    /// Checks the schedule's own consistency and limits: the knob values, at least
    /// [`MIN_THREADS`] threads (a multiple of 32, at most 1024), warps that tile the
    /// thread grid, tiles that the threads load in whole rounds (at most
    /// [`MAX_STAGED_PER_THREAD`] staged floats with register prefetch), `cp.async` only
    /// for `f32` operands, at most one split per k-tile and a workspace within
    /// [`MAX_WORKSPACE_BYTES`], fusion only of a kernel with several reduction indices whose
    /// tables fit, no knob value that changes nothing (a `float4` no operand can use, a
    /// raster group beyond the tile rows), the grid within 2^31.
    pub fn check(&self, g: &GemmForm) -> Result<(), String> {
        let has = |list: &[i64], v: usize| list.contains(&(v as i64));
        if !has(&BLOCK_TILES, self.bm)
            || !has(&BLOCK_TILES, self.bn)
            || !has(&K_TILES, self.bk)
            || !has(&THREAD_TILES, self.tm)
            || !has(&THREAD_TILES, self.tn)
            || !has(&WARP_M, self.warp_m)
            || !has(&UNROLLS, self.unroll)
            || !has(&VECTORS, self.vector)
            || !has(&PIPELINES, self.pipeline)
            || !has(&RASTERS, self.raster)
            || !has(&SPLITS, self.split)
        {
            return Err(format!("{self:?} has a value outside its knob"));
        }
        let t = self.threads();
        if !(MIN_THREADS..=1024).contains(&t) || !t.is_multiple_of(32) {
            return Err(format!(
                "{t} threads per block (a multiple of 32, 64 to 1024)"
            ));
        }
        let (gm, gn) = self.thread_grid();
        if !gm.is_multiple_of(self.warp_m) || !gn.is_multiple_of(32 / self.warp_m) {
            return Err(format!(
                "a warp of {} x {} threads does not tile {gm} x {gn} threads",
                self.warp_m,
                32 / self.warp_m
            ));
        }
        if !(self.bm * self.bk).is_multiple_of(t) || !(self.bn * self.bk).is_multiple_of(t) {
            return Err("the tiles are not loaded in whole rounds of the block".into());
        }
        let (la, lb) = self.loads();
        if self.pipeline == 0 && la + lb > MAX_STAGED_PER_THREAD {
            return Err(format!(
                "{} floats per thread staged in registers (at most {MAX_STAGED_PER_THREAD})",
                la + lb
            ));
        }
        if self.pipeline >= 2 && !g.f32_operands() {
            return Err("cp.async copies f32 operands only (half ones are widened on load)".into());
        }
        if self.kfuse {
            let Some(f) = &g.fused else {
                return Err("kfuse needs several reduction indices".into());
            };
            for side in [Side::A, Side::B] {
                if g.table(side, true) && g.table_bits(side) > TABLE_BITS {
                    return Err(format!(
                        "the windows of the fused reduction need {} mask bits (at most {TABLE_BITS})",
                        g.table_bits(side)
                    ));
                }
            }
            if f.k.div_ceil(self.bk) * self.bk * 8 > MAX_TABLE_BYTES {
                return Err(format!(
                    "a fused reduction of {} points needs a table over {MAX_TABLE_BYTES} bytes",
                    f.k
                ));
            }
        }
        if self.vector == 4
            && ![Side::A, Side::B]
                .iter()
                .any(|&s| self.plan(g, s).width == 4)
        {
            return Err("no operand can be loaded with float4s".into());
        }
        let (tiles_m, _) = self.tile_grid(g);
        if self.raster > 1 && self.raster > tiles_m {
            return Err(format!(
                "raster groups of {} tile rows, but there are {tiles_m}",
                self.raster
            ));
        }
        if self.split > 1 {
            let kt = self.k_tiles(g);
            if self.split > kt && !self.splits_outer(g) {
                return Err(format!(
                    "split {} of {kt} k-tiles leaves a split without one",
                    self.split
                ));
            }
            if self.workspace_bytes(g) > MAX_WORKSPACE_BYTES {
                return Err(format!(
                    "a split-K workspace of {} bytes (at most {MAX_WORKSPACE_BYTES})",
                    self.workspace_bytes(g)
                ));
            }
        }
        if self.blocks(g) >= (1 << 31) {
            return Err("more than 2^31 blocks".into());
        }
        Ok(())
    }

    /// The analytic default (Roller / tritonBLAS-style), computed from the device and the
    /// shape with no measurement:
    ///
    /// * 8 × 8 thread tiles (what keeps the hot loop at 0.85+ FFMAs: smaller ones spend a
    ///   third of it on loads) in warps of 4 × 8, block tiles of 64 or 128 along `m`, `n`;
    /// * register prefetch into two shared buffers when both operands load as `float4` rows
    ///   (a plain GEMM: on an H100 it measured 14–23% ahead of every `cp.async` depth with
    ///   these tiles, `bench/results/2026-11-25-cuda-h100/`), with k-tiles of 16, or of 8,
    ///   two per iteration of the reduction loop (`unroll` 2), when the reduction is split;
    ///   else, on sm_80 and later with `f32` operands, a
    ///   `cp.async` pipeline of k-tiles of 16 (3 stages, or 2 for 128 × 128 tiles, within
    ///   the static shared memory), which the convolutions' gathers measured faster with;
    ///   else register prefetch with k-tiles of 16; `float4` loads wherever provable;
    /// * the reduction fused (`kfuse`) when that wastes less of the k-tiles than tiling the
    ///   longest index (a 7 × 7 window over 3 channels), a split of the reduction across
    ///   blocks when the output tiles cannot fill the SMs, raster groups of 8 tile rows on
    ///   grids of several waves;
    ///
    /// each candidate scored by [`SimtGemm::score`] (waves over the SMs, per-SM latency
    /// hiding from registers, threads and shared memory, the tile's intensity, pipeline
    /// fill and the split's workspace traffic).
    pub fn analytic(g: &GemmForm, target: &GpuTarget) -> SimtGemm {
        let asynchronous = target.sm >= 80 && g.f32_operands();
        let max_shared = target.max_shared_per_block as usize;
        let mut best: Option<(f64, SimtGemm)> = None;
        let mut tiles: Vec<(usize, usize)> = vec![(128, 128), (128, 64), (64, 128), (64, 64)];
        // A side shorter than 64 (n = 32, a convolution into 16 filters) wastes half a
        // 64-wide tile or more: tiles 32 wide on it (two or four warps of 8 × 8 threads'
        // tiles along the other side) are candidates too.
        if g.n < 64 {
            tiles.extend([(128, 32), (256, 32)]);
        }
        if g.m < 64 {
            tiles.extend([(32, 128), (32, 256)]);
        }
        for (bm, bn) in tiles {
            // The warp's shape: 4 × 8 threads where it tiles the block, else the nearest.
            let Some(warp_m) = [4usize, 8, 2, 16]
                .into_iter()
                .find(|&w| (bm / 8).is_multiple_of(w) && (bn / 8).is_multiple_of(32 / w))
            else {
                continue;
            };
            for kfuse in [false, true] {
                if kfuse && g.fused.is_none() {
                    continue;
                }
                let pipes: &[(usize, usize)] = if asynchronous {
                    &[(16, 3), (16, 2)]
                } else {
                    &[(16, 0)]
                };
                let Some(mut base) = pipes.iter().find_map(|&(bk, pipeline)| {
                    let mut s = SimtGemm::tiles(bm, bn, bk, 8, 8, warp_m);
                    s.pipeline = pipeline;
                    s.kfuse = kfuse;
                    s.vector = 4;
                    if s.check(g).is_err() {
                        s.vector = 1;
                    }
                    (s.check(g).is_ok() && s.shared_bytes(g) <= max_shared).then_some(s)
                }) else {
                    continue;
                };
                // Both operands as `float4` rows (a plain GEMM): register prefetch, which
                // measured 14–23% ahead of every `cp.async` depth with 8 × 8 thread tiles on
                // an H100 (the implicit-GEMM convolutions' gathers stay asynchronous).
                // A narrow tile doubles the loads per multiply-add of the long side's
                // operand: only where it is a plain matrix read as `float4` rows. A gathered
                // one (a fused reduction's table, ~3.5 instructions a point; loads with
                // window checks) takes over the hot loop (FFMA share 0.83–0.86, spills).
                let long = if bn < 64 { Side::A } else { Side::B };
                let plain = |s: &SimtGemm, side| {
                    let p = s.plan(g, side);
                    p.width == 4 && !p.table
                };
                let matrix = g.access(long).dims.iter().all(|d| d.as_var().is_some());
                if (bm < 64 || bn < 64) && !(matrix && plain(&base, long)) {
                    continue;
                }
                let mut prefetch = base.clone();
                prefetch.pipeline = 0;
                // A narrow tile stages more of the long side per thread: k-tiles of 8, two
                // per iteration, keep it within the registers.
                if prefetch.check(g).is_err() {
                    prefetch.bk = 8;
                    prefetch.unroll = 2;
                }
                if base.pipeline > 0
                    && prefetch.check(g).is_ok()
                    && plain(&prefetch, Side::A)
                    && plain(&prefetch, Side::B)
                {
                    base = prefetch;
                }
                for split in SPLITS {
                    let mut s = base.clone();
                    s.split = split as usize;
                    // With register prefetch, k-tiles of 8 when the reduction is split: more
                    // of them per split to overlap (measured ahead of 16 there, behind it
                    // without a split).
                    if s.pipeline == 0 && s.vector == 4 && s.split > 1 {
                        s.bk = 8;
                        // Two k-tiles of 8 per iteration of the reduction loop (measured
                        // 0.96 of the best point where one per iteration measured 0.84–0.85;
                        // behind one with k-tiles of 16).
                        s.unroll = 2;
                        if s.check(g).is_err() {
                            s.bk = base.bk;
                            s.unroll = base.unroll;
                        }
                    }
                    // Each split keeps a pipeline's worth of k-tiles.
                    if s.split > 1 && s.tiles_per_split(g) * s.outer_per_split(g) < 4 {
                        continue;
                    }
                    if s.check(g).is_err() {
                        continue;
                    }
                    let score = s.score(g, target);
                    if best.as_ref().is_none_or(|(b, _)| score > *b * 1.000_001) {
                        best = Some((score, s));
                    }
                }
            }
        }
        let mut s = best
            .map(|(_, s)| s)
            .unwrap_or_else(|| SimtGemm::tiles(64, 64, 16, 8, 8, 4));
        let (tiles_m, tiles_n) = s.tile_grid(g);
        let waves = s.blocks(g) as f64 / target.sm_count.max(1) as f64;
        if tiles_m >= 16 && tiles_n >= 8 && waves > 2.0 {
            s.raster = 8;
        }
        s
    }

    /// The analytic model behind [`SimtGemm::analytic`]: useful multiply-adds per unit of
    /// time. An SM runs `ceil(blocks / SMs)` blocks one after the other, each in time
    /// proportional to its tile's area times its k-tiles (the pipeline's fill of about two
    /// tiles per outer reduction iteration included; the split's partial-tile traffic
    /// counted as five tiles, the last arriver's sum as a third of a tile per partial),
    /// over the tile's efficiency: its arithmetic intensity `bm·bn / (bm + bn)` against 64,
    /// and the latency hiding of the warps resident on the SM (the blocks per SM that
    /// registers — about 64 + accumulators per thread —, threads and shared memory allow,
    /// at most as many as it has blocks; 8 warps hide it all) and the issue slots its loads
    /// take per multiply-add. A fused reduction costs a tenth more; per-point padding checks
    /// of a tiled index a third more.
    pub fn score(&self, g: &GemmForm, target: &GpuTarget) -> f64 {
        let t = self.threads().max(1);
        let regs = (self.accumulators() + 64).min(255);
        let by_regs = target.regs_per_sm as usize / (regs * t).max(1);
        let by_threads = target.max_threads_per_sm as usize / t;
        let by_shared = target.blocks_by_shared(self.shared_bytes(g));
        let per_sm = by_regs.min(by_threads).min(by_shared).clamp(1, 32);
        let sms = target.sm_count.max(1) as usize;
        let blocks = self.blocks(g).max(1);
        let blocks_per_sm = blocks.div_ceil(sms);
        let resident = per_sm.min(blocks_per_sm);
        let warps = (resident * t / 32) as f64;
        let hide = (warps / 8.0).min(1.0).sqrt();
        let intensity = (self.bm * self.bn) as f64 / (self.bm + self.bn) as f64;
        // Issue slots per FMA spent on loads: each element of A feeds `bn` FMAs, of B `bm`,
        // and the thread tile's shared reads.
        let issue = 1.0
            + self.load_cost(g, Side::A) / self.bn as f64
            + self.load_cost(g, Side::B) / self.bm as f64
            + 0.25 * (1.0 / self.tm as f64 + 1.0 / self.tn as f64);
        let efficiency = (intensity / 64.0).min(1.0).powf(0.3) * hide / issue;
        let fuse = self.fuses(g);
        let mut k_cost = (self.outer_per_split(g) * (self.tiles_per_split(g) + 2)) as f64;
        if fuse {
            k_cost *= 1.1;
        } else {
            let checked = [Side::A, Side::B].iter().any(|&s| {
                g.access(s)
                    .dims
                    .iter()
                    .any(|d| d.as_var().is_none() && d.terms.iter().any(|t| t.0 == g.k_axis))
            });
            if checked {
                k_cost *= 1.33;
            }
        }
        if self.split > 1 {
            k_cost += 5.0 + (self.split - 1) as f64 / 3.0;
        }
        let time =
            blocks_per_sm as f64 * (self.bm * self.bn * self.bk) as f64 * k_cost / efficiency;
        let useful = (g.m * g.n * g.batch) as f64 * (g.k * g.outer) as f64;
        useful / time
    }
}

impl SimtGemm {
    /// Instructions per element of an operand's tile copy (measured in the SASS of the
    /// defaults): a quarter of a `float4` and its address, a scalar load, or a fused-table
    /// point (its entry, address and mask check); without `cp.async` a shared store more.
    fn load_cost(&self, g: &GemmForm, side: Side) -> f64 {
        let p = self.plan(g, side);
        let load = if p.table {
            3.5
        } else if p.width == 4 {
            0.5
        } else {
            1.5
        };
        load + if p.asynchronous { 0.0 } else { 1.0 }
    }
}

/// The banks (of 32 four-byte banks) each of a warp's accesses touches, given each lane's
/// word address and access width in words: the number of extra shared-memory wavefronts
/// (0: conflict-free). A 128-bit access is served a quarter-warp at a time, a 64-bit one a
/// half-warp at a time; lanes reading the same word are one access (a broadcast).
///
/// ```
/// use tensor_dsl::template::gpu_simt::bank_conflicts;
/// // 32 consecutive words: one wavefront.
/// assert_eq!(bank_conflicts(&(0..32).collect::<Vec<_>>(), 1), 0);
/// // A stride of 2 words: two lanes per bank.
/// assert_eq!(bank_conflicts(&(0..32).map(|l| 2 * l).collect::<Vec<_>>(), 1), 1);
/// ```
pub fn bank_conflicts(words: &[usize], width: usize) -> usize {
    let per_phase = match width {
        4 => 8,
        2 => 16,
        _ => 32,
    };
    let mut extra = 0;
    for phase in words.chunks(per_phase) {
        let mut distinct: Vec<usize> = phase.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let mut per_bank = [0usize; 32];
        for &w in &distinct {
            for j in 0..width {
                per_bank[(w + j) % 32] += 1;
            }
        }
        extra += per_bank.iter().copied().max().unwrap_or(1).max(1) - 1;
    }
    extra
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::parse_text;

    fn form(src: &str, extents: &[usize], dtypes: &str) -> GemmForm {
        let k = parse_text("k", src, None)
            .unwrap()
            .with_dtypes(dtypes)
            .unwrap();
        gemm_form(&k, extents).unwrap()
    }

    const MM: &str = "c[[i, j]] += a[[i, k]] * b[[k, j]]";
    const CONV7: &str =
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]";

    #[test]
    fn the_default_splits_k_when_the_tiles_cannot_fill_the_gpu() {
        let h100 = GpuTarget::h100();
        let g = form(MM, &[512, 64, 1024], "");
        let s = SimtGemm::analytic(&g, &h100);
        assert!(s.split > 1, "{s:?}");
        assert!(s.blocks(&g) <= 2 * h100.sm_count as usize, "{s:?}");
        assert!(s.workspace_bytes(&g) <= MAX_WORKSPACE_BYTES);
        // A square GEMM fills the GPU without: no split, raster groups, float4 and register
        // prefetch (a plain GEMM's both operands load as float4 rows).
        let g = form(MM, &[4096, 4096, 4096], "");
        let s = SimtGemm::analytic(&g, &h100);
        assert_eq!((s.split, s.raster, s.vector), (1, 8, 4), "{s:?}");
        assert!(s.pipeline == 0 && s.shared_bytes(&g) <= 48 * 1024, "{s:?}");
        assert_eq!((s.tm, s.tn), (8, 8));
        // A convolution's gathered operand keeps the cp.async pipeline.
        let g = form(CONV7, &[1, 64, 112, 112, 3, 7, 7], "");
        assert!(SimtGemm::analytic(&g, &h100).pipeline >= 2);
    }

    #[test]
    fn a_short_side_of_plain_matrices_gets_a_narrow_tile() {
        let h100 = GpuTarget::h100();
        // n = 32: a 64-wide tile would compute as many zeros as outputs.
        let g = form(MM, &[16384, 32, 256], "");
        let s = SimtGemm::analytic(&g, &h100);
        assert_eq!((s.bn, s.warp_m), (32, 8), "{s:?}");
        assert!(s.check(&g).is_ok() && s.pipeline == 0, "{s:?}");
        let g = form(MM, &[16, 4096, 4096], "");
        assert_eq!(SimtGemm::analytic(&g, &h100).bm, 32);
        // Not where the long side is gathered: a convolution into 32 filters keeps 64.
        let conv = "y[[n, f, p, q]] += x[[n, c, p + r - 2, q + s - 2]] * w[[f, c, r, s]]";
        let g = form(conv, &[4, 32, 32, 32, 16, 5, 5], "");
        let s = SimtGemm::analytic(&g, &h100);
        assert!(s.bm >= 64 && s.bn >= 64, "{s:?}");
    }

    #[test]
    fn the_default_fuses_a_short_windowed_reduction() {
        let g = form(CONV7, &[1, 64, 112, 112, 3, 7, 7], "");
        assert_eq!(g.fused.as_ref().map(|f| f.k), Some(147));
        // x is read through the table (padding), w linearly in (c, r, s).
        assert!(g.table(Side::A, true) && !g.table(Side::B, true));
        assert_eq!(g.table_bits(Side::A), 14);
        let s = SimtGemm::analytic(&g, &GpuTarget::h100());
        assert!(s.kfuse && s.check(&g).is_ok(), "{s:?}");
        assert!(s.plan(&g, Side::A).table);
    }

    #[test]
    fn without_cp_async_the_default_prefetches_into_registers() {
        let mut turing = GpuTarget::h100();
        turing.sm = 75;
        let g = form(MM, &[1024, 1024, 1024], "");
        assert_eq!(SimtGemm::analytic(&g, &turing).pipeline, 0);
        let g = form(MM, &[1024, 1024, 1024], "a=bf16,b=bf16");
        let s = SimtGemm::analytic(&g, &GpuTarget::h100());
        assert_eq!((s.pipeline, s.vector), (0, 1), "{s:?}");
    }

    #[test]
    fn float4_loads_need_provable_alignment() {
        // a[[i, k]]: along k (K % 4 == 0); b[[k, j]]: along rows (N % 4 == 0).
        let g = form(MM, &[64, 48, 40], "");
        assert!(g.vector_k(Side::A, false) && g.vector_rows(Side::B));
        let g = form(MM, &[64, 47, 41], "");
        assert!(!g.vector_k(Side::A, false) && !g.vector_rows(Side::B));
        let mut s = SimtGemm::tiles(64, 64, 16, 8, 8, 4);
        s.vector = 4;
        assert!(s.check(&g).unwrap_err().contains("float4"));
        // A 1x1 convolution's pixels are contiguous runs of P*Q: 14*14 is a multiple of 4,
        // 7*7 is not; a padded (affine) access never is.
        let conv1 = "y[[n, f, p, q]] += x[[n, c, p, q]] * w[[f, c]]";
        assert!(form(conv1, &[2, 64, 14, 14, 32], "").vector_rows(Side::A));
        assert!(!form(conv1, &[2, 64, 7, 7, 32], "").vector_rows(Side::A));
        assert!(!form(CONV7, &[1, 64, 112, 112, 3, 7, 7], "").vector_rows(Side::A));
    }

    #[test]
    fn knob_values_that_change_nothing_or_break_a_limit_are_rejected() {
        let g = form(MM, &[100, 100, 64], "");
        let base = SimtGemm::tiles(32, 32, 16, 4, 4, 4);
        assert!(base.check(&g).is_ok());
        let with = |f: &dyn Fn(&mut SimtGemm)| {
            let mut s = base.clone();
            f(&mut s);
            s.check(&g)
        };
        assert!(with(&|s| s.kfuse = true).is_err(), "one reduction index");
        assert!(with(&|s| s.split = 8).is_err(), "8 splits of 4 k-tiles");
        assert!(with(&|s| s.split = 4).is_ok());
        assert!(with(&|s| s.raster = 8).is_err(), "4 tile rows");
        assert!(with(&|s| s.raster = 4).is_ok());
        let half = form(MM, &[100, 100, 64], "a=f16");
        let mut s = base.clone();
        s.pipeline = 3;
        assert!(s.check(&half).is_err() && s.check(&g).is_ok());
    }
}

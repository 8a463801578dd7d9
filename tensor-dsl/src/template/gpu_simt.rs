//! The SIMT GEMM form of the GPU template: every kernel whose statement is a product of two
//! inputs summed over reduction indices (`c[[i, j]] += a[[i, k]] * b[[k, j]]`, batched
//! matmuls, convolutions, ...) is computed as an (implicit) GEMM `C[m, n] += A[m, k] · B[k, n]`
//! over fused axes — the output indices only `a` reads form `m`, those only `b` reads form
//! `n`, those both read are the batch — with the structure of a fast SGEMM:
//!
//! * a block computes a `bm × bn` tile of `C`, a thread a `tm × tn` register tile made of
//!   4 × 4 pieces strided across the block tile (conflict-free `float4` shared loads), the
//!   threads of a warp laid out `warp_m × (32 / warp_m)`;
//! * the reduction index with the largest extent is walked in `bk`-deep tiles (the hot
//!   loop); the other reduction indices (a convolution's `r, s`) are serial loops around
//!   it, with each thread's addresses and padding checks recomputed once per iteration of
//!   them, so the hot loop only adds an offset;
//! * register-prefetch double buffering: while a tile is multiplied out of shared memory,
//!   the next one is loaded from global memory into registers, then stored to the other
//!   shared buffer — one barrier per tile;
//! * shared tiles are k-major (`[bk][bm + 4]`): the compute loop reads `float4`s;
//! * edge tiles are predicated (reads outside read 0, stores are guarded), so every shape
//!   runs; epilogues run on the accumulators before the one store.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::gpu_simt::{gemm_form, SimtGemm};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let g = gemm_form(&k, &[512, 64, 1024]).unwrap();
//! assert_eq!((g.m, g.n, g.k, g.batch), (512, 64, 1024, 1));
//! let s = SimtGemm::analytic(&g, &tensor_dsl::template::gpu::GpuTarget::h100());
//! assert!(s.check(&g).is_ok());
//! ```

use crate::ir::{Access, BinOp, BodyKind, Expr, Kernel};
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
/// Padding of a shared row, floats (keeps rows 16-byte aligned, shifts banks).
pub const SHARED_PAD: usize = 4;
/// Fewest threads per block.
pub const MIN_THREADS: usize = 64;

/// How a kernel is a GEMM (see the module docs). Axes are index ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmForm {
    /// The operand holding the `m` axes.
    pub a: Access,
    /// The operand holding the `n` axes.
    pub b: Access,
    /// Output indices only `a` reads, in output order (fused, the last fastest).
    pub m_axes: Vec<usize>,
    /// Output indices only `b` reads.
    pub n_axes: Vec<usize>,
    /// Output indices both read.
    pub batch_axes: Vec<usize>,
    /// The reduction index walked in tiles.
    pub k_axis: usize,
    /// The other reduction indices (serial loops around the tiled one).
    pub outer_axes: Vec<usize>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    /// Iterations of the outer reduction loops together.
    pub outer: usize,
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
    let uses = |acc: &Access, v: usize| acc.dims.iter().any(|d| d.terms.iter().any(|t| t.0 == v));
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
    let g = GemmForm {
        m: prod(&m_axes),
        n: prod(&n_axes),
        k: ext(k_axis),
        batch: prod(&batch_axes),
        outer: prod(&outer_axes),
        a,
        b,
        m_axes,
        n_axes,
        batch_axes,
        k_axis,
        outer_axes,
    };
    (g.m >= 16 && g.n >= 16 && g.m < (1 << 30) && g.n < (1 << 30)).then_some(g)
}

/// One point of the SIMT GEMM space.
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
}

fn blocks_of(x: usize, tile: usize) -> usize {
    x.div_ceil(tile.max(1))
}

impl SimtGemm {
    /// Threads along `m`, along `n`.
    pub fn thread_grid(&self) -> (usize, usize) {
        (self.bm / self.tm.max(1), self.bn / self.tn.max(1))
    }

    /// Threads per block.
    pub fn threads(&self) -> usize {
        let (a, b) = self.thread_grid();
        a * b
    }

    /// Blocks in the grid for `g`.
    pub fn blocks(&self, g: &GemmForm) -> usize {
        blocks_of(g.m, self.bm)
            .saturating_mul(blocks_of(g.n, self.bn))
            .saturating_mul(g.batch)
    }

    /// Static shared memory, bytes: two k-major tiles of each operand.
    pub fn shared_bytes(&self) -> usize {
        2 * self.bk * (self.bm + SHARED_PAD + self.bn + SHARED_PAD) * 4
    }

    /// Accumulators per thread.
    pub fn accumulators(&self) -> usize {
        self.tm * self.tn
    }

    /// Loads per thread per tile of `a` and of `b`.
    pub fn loads(&self) -> (usize, usize) {
        let t = self.threads().max(1);
        (self.bm * self.bk / t, self.bn * self.bk / t)
    }

    /// Checks the schedule's own consistency and limits: the knob values, at least
    /// [`MIN_THREADS`] threads (a multiple of 32, at most 1024), warps that tile the
    /// thread grid, tiles that the threads load in whole rounds, the grid within 2^31.
    pub fn check(&self, g: &GemmForm) -> Result<(), String> {
        let has = |list: &[i64], v: usize| list.contains(&(v as i64));
        if !has(&BLOCK_TILES, self.bm)
            || !has(&BLOCK_TILES, self.bn)
            || !has(&K_TILES, self.bk)
            || !has(&THREAD_TILES, self.tm)
            || !has(&THREAD_TILES, self.tn)
            || !has(&WARP_M, self.warp_m)
            || !has(&UNROLLS, self.unroll)
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
        // Then every thread loads one row (or one k) of a tile in every round.
        if t < self.bm.max(self.bn) || !t.is_multiple_of(self.bk) {
            return Err(format!(
                "{t} threads cannot give each a fixed row of a {} x {} x {} tile",
                self.bm, self.bn, self.bk
            ));
        }
        if self.blocks(g) >= (1 << 31) {
            return Err("more than 2^31 blocks".into());
        }
        Ok(())
    }

    /// The analytic default (Roller / tritonBLAS-style): 8 × 8 thread tiles (what keeps
    /// the hot loop at 0.85+ FFMAs: smaller ones spend a third of it on loads), block
    /// tiles of 64 or 128 along `m` and `n`, a k-tile of 16 (32 for 64 × 64 blocks, to
    /// amortize the per-tile loads), chosen by [`SimtGemm::score`] from the device's SM
    /// count, registers and shared memory and the shape.
    pub fn analytic(g: &GemmForm, target: &GpuTarget) -> SimtGemm {
        let mut best: Option<(f64, SimtGemm)> = None;
        for bm in [128, 64] {
            for bn in [128, 64] {
                let s = SimtGemm {
                    bm,
                    bn,
                    bk: if bm * bn >= 8192 { 16 } else { 32 },
                    tm: 8,
                    tn: 8,
                    warp_m: 4,
                    unroll: 1,
                };
                if s.check(g).is_err() {
                    continue;
                }
                let score = s.score(g, target);
                if best.as_ref().is_none_or(|(b, _)| score > *b * 1.000_001) {
                    best = Some((score, s));
                }
            }
        }
        best.map(|(_, s)| s).unwrap_or(SimtGemm {
            bm: 64,
            bn: 64,
            bk: 32,
            tm: 8,
            tn: 8,
            warp_m: 4,
            unroll: 1,
        })
    }

    /// The analytic model behind [`SimtGemm::analytic`]: useful outputs per unit of time,
    /// where an SM runs `ceil(blocks / SMs)` tiles one after the other, each in time
    /// proportional to its area over the tile's efficiency (its arithmetic intensity
    /// `bm·bn / (bm + bn)` against 64) and the latency hiding of the warps resident on the
    /// SM (the blocks per SM that registers — about 64 + accumulators per thread —, threads
    /// and shared memory allow, at most as many as it has tiles; 8 warps hide it all).
    pub fn score(&self, g: &GemmForm, target: &GpuTarget) -> f64 {
        let t = self.threads().max(1);
        let regs = (self.accumulators() + 64).min(255);
        let by_regs = target.regs_per_sm as usize / (regs * t).max(1);
        let by_threads = target.max_threads_per_sm as usize / t;
        let by_shared = target.shared_per_sm as usize / self.shared_bytes().max(1);
        let per_sm = by_regs.min(by_threads).min(by_shared).clamp(1, 32);
        let sms = target.sm_count.max(1) as usize;
        let blocks = self.blocks(g).max(1);
        let tiles_per_sm = blocks.div_ceil(sms);
        let resident = per_sm.min(tiles_per_sm);
        let warps = (resident * t / 32) as f64;
        let hide = (warps / 8.0).min(1.0).sqrt();
        let intensity = (self.bm * self.bn) as f64 / (self.bm + self.bn) as f64;
        let efficiency = (intensity / 64.0).min(1.0).powf(0.3) * hide;
        let time = tiles_per_sm as f64 * (self.bm * self.bn) as f64 / efficiency;
        (g.m * g.n * g.batch) as f64 / time
    }
}

//! The tensor-core view of a kernel: which contractions map onto `mma.sync.m16n8k16`, and
//! the geometry a [`TcSchedule`] gives them (tiles, shared-memory layouts, load widths,
//! launch).
//!
//! A kernel qualifies ([`Gemm::analyze`]) when its main statement is `out[...] += x[...] *
//! y[...]` with `x` and `y` both `f16` or both `bf16`, every reduction index used by both,
//! every output index used by at least one, and at least one output index used by each alone.
//! The output indices only in `x` fuse into the GEMM's `m`, those only in `y` into `n`, the
//! reduction indices into `k`; output indices in both are batch indices (one block per
//! instance). Matmuls with any operand layout (`a[[k, i]]`, `b[[j, k]]`), batched matmuls and
//! convolutions as implicit GEMMs (`m` = batch × output pixels, `k` = channels × filter taps,
//! affine input coordinates bounds-checked: zero padding) qualify; products of three tensors
//! and broadcasts do not (they stay on the SIMT template). An operand whose address is linear
//! in the fused indices is copied with `cp.async` where alignment allows; others element by
//! element.
//!
//! The code itself is printed straight from this plan by [`crate::codegen::tensorcore`], not
//! through [`crate::lower::Nest`]: the nest's statements are per-thread scalar operations,
//! and the warp-level fragments (which lane holds which element of an MMA operand,
//! `ldmatrix` row addresses, `cp.async` groups) would each need new node kinds in the shared
//! printer and in every pass that walks the nest. The plan below is the data those passes
//! would read.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::lower::tensorcore::Gemm;
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap()
//!     .with_dtypes("a=bf16,b=bf16").unwrap();
//! let shapes: [&[usize]; 3] = [&[67, 93], &[93, 45], &[67, 45]];
//! let g = Gemm::analyze(&k, &[67, 45, 93], &shapes).unwrap();
//! assert_eq!((g.m_extent, g.n_extent, g.k_extent), (67, 45, 93));
//! assert!(g.a.k_major && !g.b.k_major);
//! assert_eq!((g.a.width, g.b.width), (1, 1)); // rows of 93 and 45 halves: no aligned chunks
//!
//! let conv = parse_text("conv", "y[[n,f,p,q]] += x[[n,c,p+r,q+s]] * w[[f,c,r,s]]", None)
//!     .unwrap().with_dtypes("x=f16,w=f16").unwrap();
//! let shapes: [&[usize]; 3] = [&[2, 8, 10, 10], &[16, 8, 3, 3], &[2, 16, 8, 8]];
//! let extents = tensor_dsl::ir::bind(&conv, &shapes).unwrap();
//! let g = Gemm::analyze(&conv, &extents, &shapes).unwrap();
//! assert_eq!((g.m_extent, g.n_extent, g.k_extent), (2 * 8 * 8, 16, 8 * 3 * 3));
//! assert!(!g.a.linear && g.b.linear); // the input's coordinates are affine
//! ```

use crate::codegen::strides;
use crate::ir::{Access, BinOp, BodyKind, DType, Expr, Kernel};
use serde::{Deserialize, Serialize};

/// One point of the tensor-core template, decoded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TcSchedule {
    /// Rows (`m`) of one warp's tile: a multiple of 16.
    pub warp_m: usize,
    /// Columns (`n`) of one warp's tile: a multiple of 16.
    pub warp_n: usize,
    /// Warps along `m` in a block.
    pub warps_m: usize,
    /// Warps along `n` in a block.
    pub warps_n: usize,
    /// Warp groups splitting each stage's 16-deep steps (sliced K); their partial sums are
    /// added through shared memory before the epilogue. 1: no split.
    #[serde(default = "one")]
    pub split_k: usize,
    /// Blocks that split the reduction of one output tile (split-K across blocks, see
    /// [`crate::codegen::split_k`]): each reduces a contiguous run of the k tiles, the last
    /// to finish adds the partial sums in split order. 1: no split.
    #[serde(default = "one")]
    pub splits: usize,
    /// Depth (`k`) of one pipeline stage: a multiple of 16.
    pub block_k: usize,
    /// Shared-memory stages of the `cp.async` pipeline (2: double buffering).
    pub stages: usize,
    /// XOR-swizzled shared memory (16-byte chunks); otherwise rows padded by 16 bytes.
    pub swizzle: bool,
}

impl TcSchedule {
    /// Threads per block.
    pub fn threads(&self) -> usize {
        32 * self.warps_m * self.warps_n * self.split_k
    }

    /// The block tile's rows.
    pub fn block_m(&self) -> usize {
        self.warp_m * self.warps_m
    }

    /// The block tile's columns.
    pub fn block_n(&self) -> usize {
        self.warp_n * self.warps_n
    }

    /// `f32` accumulators per thread.
    pub fn accumulators(&self) -> usize {
        self.warp_m / 16 * (self.warp_n / 8) * 4
    }

    /// Shared memory for the partial sums of the warp groups after the first, bytes.
    pub fn partial_sum_bytes(&self) -> usize {
        4 * (self.split_k - 1) * self.warps_m * self.warps_n * 32 * self.accumulators()
    }

    /// Checks the shape rules the code relies on (tile multiples, at least two stages).
    pub fn validate(&self) -> Result<(), String> {
        let ok = self.warp_m >= 16
            && self.warp_m.is_multiple_of(16)
            && self.warp_n >= 16
            && self.warp_n.is_multiple_of(16)
            && self.block_k >= 16
            && self.block_k.is_multiple_of(16)
            && self.warps_m >= 1
            && self.warps_n >= 1
            && self.split_k >= 1
            && self.splits >= 1
            && (self.block_k / 16).is_multiple_of(self.split_k)
            && self.stages >= 2
            && self.threads() <= 1024
            && (!self.swizzle
                || [self.block_m(), self.block_n(), self.block_k]
                    .iter()
                    .all(|d| d.is_power_of_two()));
        if ok {
            Ok(())
        } else {
            Err(format!("not a valid tensor-core schedule: {self:?}"))
        }
    }
}

fn one() -> usize {
    1
}

/// One input operand of the MMA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    /// Its access in the main statement.
    pub access: Access,
    /// Kernel parameter id.
    pub param: usize,
    /// Whether its element address is linear in the fused row index (the `m` group for A,
    /// the `n` group for B) and the fused `k` index: every dimension a plain index and each
    /// group's indices laid out row-major. Then `row_stride` and `k_stride` are the strides
    /// of the fused indices; otherwise (an implicit-GEMM convolution's input) each element's
    /// coordinates are computed from the fused indices and bounds-checked (zero padding).
    pub linear: bool,
    pub row_stride: usize,
    pub k_stride: usize,
    /// The shared tile holds rows of `k` (`[rows][k]`, `k` contiguous); else `[k][rows]`.
    pub k_major: bool,
    /// Elements per global load (8, 4 or 2: a `cp.async` of 16, 8 or 4 bytes; 1: a plain
    /// load), the widest that every chunk's address is aligned to and that never straddles
    /// the tensor's edge.
    pub width: usize,
}

/// A kernel seen as a (batched) GEMM `C[m, n] = sum_k A[m, k] B[k, n]`, where `m`, `n` and
/// `k` may each fuse several indices (an implicit GEMM: a convolution's `m` is its batch and
/// output pixels, its `k` the input channels and filter taps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gemm {
    /// The output indices only in A (fused into `m`, outermost first).
    pub m: Vec<usize>,
    /// The output indices only in B (fused into `n`).
    pub n: Vec<usize>,
    /// The reduction indices (fused into `k`).
    pub k: Vec<usize>,
    /// The batch indices (output indices in both operands), outermost first.
    pub batch: Vec<usize>,
    /// Their extents.
    pub batch_extents: Vec<usize>,
    /// The fused extents.
    pub m_extent: usize,
    pub n_extent: usize,
    pub k_extent: usize,
    /// The input element type (`f16` or `bf16`).
    pub dtype: DType,
    pub a: Operand,
    pub b: Operand,
    /// Per batch index: the element stride in A and B (linear operands).
    pub batch_strides: Vec<[usize; 2]>,
    /// The output's element stride of each spatial index (by index id).
    pub out_strides: Vec<usize>,
}

impl Gemm {
    /// The GEMM view of `kernel` at `extents` with these shapes, or why it has none.
    pub fn analyze(
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
    ) -> Result<Gemm, String> {
        crate::lower::check_shapes(kernel, shapes)?;
        if extents.len() != kernel.indices.len() {
            return Err("one extent per index is needed".into());
        }
        if kernel.staged.is_some() {
            return Err("a kernel of several stages".into());
        }
        if kernel.kind != BodyKind::Sum {
            return Err("not a contraction (`+=`)".into());
        }
        let (x, y) = match &kernel.body {
            Expr::Bin(BinOp::Mul, x, y) => match (&**x, &**y) {
                (Expr::Access(x), Expr::Access(y)) => (x, y),
                _ => return Err("the body is not a product of two tensors".into()),
            },
            _ => return Err("the body is not a product of two tensors".into()),
        };
        let dtype = kernel.params[x.tensor].dtype;
        if !matches!(dtype, DType::F16 | DType::BF16) || kernel.params[y.tensor].dtype != dtype {
            return Err("the operands are not both f16 or both bf16".into());
        }
        let uses = |a: &Access, v: usize| {
            a.dims
                .iter()
                .any(|d| d.terms.iter().any(|&(t, c)| t == v && c != 0))
        };
        let k = kernel.reduction();
        if k.is_empty() || k.iter().any(|&r| !uses(x, r) || !uses(y, r)) {
            return Err("a reduction index is not in both operands".into());
        }
        let (mut m, mut n, mut batch) = (Vec::new(), Vec::new(), Vec::new());
        for s in kernel.spatial() {
            match (uses(x, s), uses(y, s)) {
                (true, true) => batch.push(s),
                (true, false) => m.push(s),
                (false, true) => n.push(s),
                (false, false) => return Err("an output index is in neither operand".into()),
            }
        }
        if m.is_empty() || n.is_empty() {
            return Err("no row or no column index".into());
        }
        let too_big = shapes
            .iter()
            .any(|s| s.iter().fold(1usize, |a, &d| a.saturating_mul(d)) >= 1 << 31);
        if too_big {
            return Err("a tensor has 2^31 elements or more".into());
        }
        let fused = |g: &[usize]| g.iter().map(|&i| extents[i]).product::<usize>();
        // The stride of each plain index of an access whose dimensions are all plain and
        // distinct; `None` otherwise.
        let plain_strides = |a: &Access| -> Option<Vec<(usize, usize)>> {
            let st = strides(shapes[a.tensor]);
            let vars: Vec<usize> = a.dims.iter().map(|d| d.as_var()).collect::<Option<_>>()?;
            let distinct = (1..vars.len()).all(|i| !vars[..i].contains(&vars[i]));
            distinct.then(|| vars.into_iter().zip(st).collect())
        };
        let operand = |a: &Access, rows: &[usize]| -> Operand {
            let generic = Operand {
                access: a.clone(),
                param: a.tensor,
                linear: false,
                row_stride: 0,
                k_stride: 0,
                k_major: true,
                width: 1,
            };
            let Some(st) = plain_strides(a) else {
                return generic;
            };
            let stride = |v: usize| st.iter().find(|p| p.0 == v).map_or(0, |p| p.1);
            // Row-major within a group: each member's stride is the next one's times its
            // extent.
            let row_major = |g: &[usize]| {
                g.windows(2)
                    .all(|w| stride(w[0]) == stride(w[1]) * extents[w[1]])
            };
            if !row_major(rows) || !row_major(&k) {
                return generic;
            }
            let last = st.last().map(|p| p.0);
            let contiguous: Option<&[usize]> = match last {
                Some(v) if k.contains(&v) => Some(&k),
                Some(v) if rows.contains(&v) => Some(rows),
                _ => None,
            };
            let width = contiguous.map_or(1, |g| {
                [8usize, 4, 2]
                    .into_iter()
                    .find(|&w| {
                        fused(g).is_multiple_of(w)
                            && st
                                .iter()
                                .all(|&(v, s)| g.contains(&v) || s.is_multiple_of(w))
                    })
                    .unwrap_or(1)
            });
            Operand {
                linear: true,
                row_stride: rows.last().map_or(0, |&v| stride(v)),
                k_stride: k.last().map_or(0, |&v| stride(v)),
                k_major: last.is_none_or(|v| !rows.contains(&v)),
                width,
                ..generic
            }
        };
        let (a, b) = (operand(x, &m), operand(y, &n));
        let batch_stride = |op: &Operand, v: usize| {
            plain_strides(&op.access)
                .and_then(|st| st.iter().find(|p| p.0 == v).map(|p| p.1))
                .unwrap_or(0)
        };
        let out = strides(shapes[kernel.output]);
        Ok(Gemm {
            batch_strides: batch
                .iter()
                .map(|&v| [batch_stride(&a, v), batch_stride(&b, v)])
                .collect(),
            batch_extents: batch.iter().map(|&v| extents[v]).collect(),
            m_extent: fused(&m),
            n_extent: fused(&n),
            k_extent: fused(&k),
            out_strides: (0..kernel.indices.len())
                .map(|i| out.get(i).copied().unwrap_or(0))
                .collect(),
            batch,
            m,
            n,
            k,
            dtype,
            a,
            b,
        })
    }

    /// Whether `kernel` has a tensor-core form at these extents and shapes.
    pub fn fits(kernel: &Kernel, extents: &[usize], shapes: &[&[usize]]) -> bool {
        Gemm::analyze(kernel, extents, shapes).is_ok()
    }

    /// The number of batch instances (product of the batch extents).
    pub fn batch_count(&self, extents: &[usize]) -> usize {
        self.batch.iter().map(|&b| extents[b]).product()
    }

    /// [`Gemm::batch_count`] at the extents it was analyzed at.
    pub fn batch_count_of(&self) -> usize {
        self.batch_extents.iter().product()
    }

    /// Static shared memory per block of `s`, bytes: every stage of both operands' tiles,
    /// or the partial sums of a split K if they need more (they reuse the same memory).
    pub fn shared_bytes(&self, s: &TcSchedule) -> usize {
        let pipeline = 2
            * s.stages
            * (Tile::for_operand(s, true, &self.a).elements()
                + Tile::for_operand(s, false, &self.b).elements());
        pipeline.max(s.partial_sum_bytes())
    }

    /// Output tiles of `s`: blocks of a launch without split-K (batch instances included).
    pub fn tiles(&self, s: &TcSchedule) -> usize {
        self.batch_count_of()
            * self.m_extent.div_ceil(s.block_m())
            * self.n_extent.div_ceil(s.block_n())
    }

    /// k tiles of `s` (stages of `block_k`).
    pub fn k_tiles(&self, s: &TcSchedule) -> usize {
        self.k_extent.div_ceil(s.block_k)
    }

    /// The split-K geometry of `s`, if it splits the reduction across blocks.
    pub fn split(&self, s: &TcSchedule) -> Option<crate::codegen::split_k::SplitK> {
        (s.splits > 1).then(|| crate::codegen::split_k::SplitK {
            splits: s.splits,
            tiles: self.tiles(s),
            accumulators: s.accumulators(),
            // Only the first warp group of a sliced K keeps sums after the block's own
            // reduction, but every thread has a slot: the slot is indexed by thread.
            threads: s.threads(),
        })
    }

    /// The launch geometry of `s`: `(blocks, threads)`.
    pub fn launch(&self, extents: &[usize], s: &TcSchedule) -> (usize, usize) {
        let blocks = self.batch_count(extents)
            * self.m_extent.div_ceil(s.block_m())
            * self.n_extent.div_ceil(s.block_n())
            * s.splits;
        (blocks, s.threads())
    }
}

/// The shared-memory tile of one operand in one stage: `rows × cols` elements, each row
/// padded by 8 elements (16 bytes) unless swizzled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub rows: usize,
    pub cols: usize,
    pub swizzle: bool,
}

impl Tile {
    /// The tile of A (`a`) or B, laid out `[m or n][k]`; [`Tile::for_operand`] transposes it
    /// for an operand that is not k-major.
    pub fn new(s: &TcSchedule, a: bool) -> Tile {
        let rows = if a { s.block_m() } else { s.block_n() };
        Tile {
            rows,
            cols: s.block_k,
            swizzle: s.swizzle,
        }
    }

    /// The tile of an operand as it is stored: `[rows][k]` or `[k][rows]`.
    pub fn for_operand(s: &TcSchedule, a: bool, op: &Operand) -> Tile {
        let t = Tile::new(s, a);
        if op.k_major {
            t
        } else {
            Tile {
                rows: t.cols,
                cols: t.rows,
                swizzle: t.swizzle,
            }
        }
    }

    /// Elements per row as laid out.
    pub fn pitch(&self) -> usize {
        if self.swizzle {
            self.cols
        } else {
            self.cols + 8
        }
    }

    /// Elements of one stage.
    pub fn elements(&self) -> usize {
        self.rows * self.pitch()
    }

    /// The 16-byte chunks whose index is XORed with the row (a power of two, at most 8).
    pub fn swizzle_span(&self) -> usize {
        (self.cols / 8).clamp(1, 8)
    }
}

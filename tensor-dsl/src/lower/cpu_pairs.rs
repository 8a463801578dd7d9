//! `bf16` pairs: the CPU micro-kernel ([`crate::lower::cpu_micro`]) for a kernel that sums the
//! product of two `bf16` inputs over one reduction index, two reduction points per
//! instruction ([`CpuConfig::pairs`]).
//!
//! The packed panel holds the operand's raw `bf16` values, not widened, in pairs of
//! consecutive reduction points: element (`p`, `v`) of a panel with rows of `S` at
//! `((p >> 1) * S + v) * 2 + (p & 1)`, so that 16 lanes of two points are one 64-byte vector
//! of 32 `bf16`. For each pair of points the tile loads those vectors, reads the broadcast
//! operand's two values as one 32-bit pair (one load where the reduction index is its
//! contiguous dimension) and adds both products to each accumulator with `td_dot2`: AVX-512
//! BF16's `vdpbf16ps` where the compiler targets a CPU that has it (`__AVX512BF16__`), else
//! the two halves widened by a shift and a mask and two FMAs, so the same source runs on any
//! CPU. An odd last point pairs with zero (its vector masked to the low halves).
//!
//! `vdpbf16ps` treats `bf16` subnormals as zero and rounds once per pair; the sums differ
//! from the one-point-at-a-time order by rounding, within the checks' tolerance.
//!
//! The panel is filled two reduction points at a time: two contiguous rows of the operand
//! interleaved, which the compiler vectorizes (filled one element at a time, the scattered
//! 2-byte stores cost about a seventh of the 512×1024·1024×1024 default's time).
//!
//! Why: with the panel widened to `f32` (the plain vector code), a `bf16` matmul runs at the
//! `f32` kernel's speed at best; two points per instruction on half the bytes took that
//! default from 209–221 to 439–444 GFLOPS on two Zen 4 cores (generated C timed side by
//! side), level with oneDNN's `bf16` matmul
//! (`bench/results/2026-11-26-zen4-cpu-bf16/README.md`).
//!
//! ```
//! use tensor_dsl::{codegen::c, ir::{bind, parse_text, DType}, template::cpu::CpuConfig};
//! let mut k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! k.params[0].dtype = DType::BF16;
//! k.params[1].dtype = DType::BF16;
//! let shapes: [&[usize]; 3] = [&[8, 5], &[5, 32], &[8, 32]];
//! let e = bind(&k, &shapes).unwrap();
//! let cfg = CpuConfig { vector_code: 16, pairs: true, ..CpuConfig::heuristic(&k, &e, 16) };
//! let src = c::generate(&k, &e, &shapes, &cfg);
//! // Two pairs of points, then the fifth point alone.
//! assert!(src.contains("c0_1 = td_dot2(c0_1, td_pair(&t0[5 * (u0 + 0) + i_k]), b1);"), "{src}");
//! assert!(src.contains("td_pairs_lo("), "{src}");
//! ```

use super::cpu::Lower;
use super::{AssignOp, BufId, IntType, Layout, Loop, LoopKind, Step, Stmt, Target, Ty, Value};
use crate::codegen::ExprPrinter;
use crate::ir::{Access, BinOp, BodyKind, DType, Expr, Kernel};
use crate::template::cpu::{blocked_reduction, pack_stride, packed_access, CpuConfig};

/// Lanes of a pairs vector (`f32` accumulators; 32 `bf16` per load).
pub const LANES: usize = 16;

/// Defines what the pairs code calls: `td_pairs` (a panel vector of 16 pairs, as the bits of
/// a `td_f32x16`), `td_pairs_lo` (the same with the second point of each pair zeroed),
/// `td_pair` / `td_pair2` (two `bf16` as one 32-bit pair, the first point low) and `td_dot2`.
/// Needs `td_f32x16` ([`crate::codegen::c::vector_prelude`]).
pub const PRELUDE: &str = "\
/* bf16 pairs: the panel holds two reduction points per 32-bit lane; td_dot2 adds both
   products to each f32 lane (vdpbf16ps with AVX-512 BF16, else shifts and FMAs). */
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif
typedef float td_pairs_t __attribute__((vector_size(64), aligned(2), may_alias));
typedef unsigned int td_pairs_u __attribute__((vector_size(64)));
typedef unsigned int td_pair_t __attribute__((aligned(2), may_alias));
static inline td_f32x16 td_pairs(const unsigned short *p) { return *(const td_pairs_t *)p; }
static inline td_f32x16 td_pairs_lo(const unsigned short *p)
{
    return (td_f32x16)((td_pairs_u)*(const td_pairs_t *)p & 0xffffu);
}
static inline unsigned int td_pair(const unsigned short *p) { return *(const td_pair_t *)p; }
static inline unsigned int td_pair2(unsigned short lo, unsigned short hi)
{
    return (unsigned int)lo | (unsigned int)hi << 16;
}
static inline td_f32x16 td_dot2(td_f32x16 c, unsigned int a, td_f32x16 b)
{
#if defined(__AVX512BF16__)
    return (td_f32x16)_mm512_dpbf16_ps((__m512)c, (__m512bh)_mm512_set1_epi32((int)a), (__m512bh)b);
#else
    union { unsigned int u; float f; } lo, hi;
    lo.u = a << 16;
    hi.u = a & 0xffff0000u;
    td_pairs_u u = (td_pairs_u)b;
    return c + lo.f * (td_f32x16)(u << 16) + hi.f * (td_f32x16)(u & 0xffff0000u);
#endif
}
";

/// The two accesses of a kernel that sums `x * y` of two `bf16` inputs over one reduction
/// index (no epilogue restriction: it runs on the `f32` sums).
pub fn pair_product(kernel: &Kernel) -> Option<(&Access, &Access)> {
    if kernel.kind != BodyKind::Sum || kernel.reduction().len() != 1 {
        return None;
    }
    let Expr::Bin(BinOp::Mul, x, y) = &kernel.body else {
        return None;
    };
    let (Expr::Access(x), Expr::Access(y)) = (x.as_ref(), y.as_ref()) else {
        return None;
    };
    let bf16 = |a: &Access| {
        a.tensor != kernel.output
            && kernel
                .params
                .get(a.tensor)
                .is_some_and(|p| p.dtype == DType::BF16)
    };
    (bf16(x) && bf16(y)).then_some((x, y))
}

/// Whether `config` computes `kernel`'s packed tiles in pairs: it asks for them with
/// 16-lane vector code over whole vectors, the kernel is a [`pair_product`] whose packed
/// operand is one of the two (the other read without guards and not along the vector
/// axis), and with a blocked reduction the output is unit-stride along the vector axis.
pub fn active(kernel: &Kernel, extents: &[usize], shapes: &[&[usize]], config: &CpuConfig) -> bool {
    let (Some(v), Some((x, y))) = (config.vector_axis, pair_product(kernel)) else {
        return false;
    };
    if !config.pairs
        || config.vector_code != LANES
        || !config.vector.is_multiple_of(LANES)
        || config.conv.is_some()
        || config.rows.is_some()
        || extents.len() != kernel.indices.len()
        || shapes.len() != kernel.params.len()
    {
        return false;
    }
    let Some(packed) = packed_access(kernel, extents, config) else {
        return false;
    };
    let other = if &packed == x {
        y
    } else if &packed == y {
        x
    } else {
        return false;
    };
    let walks = |a: &Access| a.dims.iter().any(|d| d.terms.iter().any(|&(t, _)| t == v));
    let in_range = |a: &Access| {
        a.dims.iter().zip(shapes[a.tensor]).all(|(d, &n)| {
            let (lo, hi) = d.range(extents);
            lo >= 0 && hi < n as i64
        })
    };
    other != &packed
        && !walks(other)
        && in_range(other)
        && in_range(&packed)
        && (blocked_reduction(kernel, extents, config).is_none()
            || super::cpu_micro::out_vector_stride(kernel, shapes, v) == Some(1))
}

/// The first panel element of the pair that starts at reduction point `point` (C text, an
/// even count from the panel's first point) and lane `v` in the pairs layout of rows of
/// `stride`: `((point >> 1) * stride + v) * 2`, with `point` even.
fn pair_start(point: &str, stride: usize, v: &str) -> String {
    format!("({point}) * {stride} + 2 * {v}")
}

impl Lower<'_> {
    /// The copy of the current panel of `access` (the packed operand, vector axis `v`;
    /// `nv` in scope) in pairs: two reduction points at a time, each lane's two values side
    /// by side (two contiguous rows interleaved, which the compiler vectorizes); an odd last
    /// point pairs with zero; the lanes past the axis up to whole vectors are zeros.
    pub(super) fn pair_panel_rows(&self, pk: BufId, access: &Access, v: usize) -> Vec<Stmt> {
        let Some(&r) = self.kernel.reduction().first() else {
            return Vec::new();
        };
        let name = self.names[r].clone();
        let stride = pack_stride(self.config.vector);
        let point = self.reduction_point();
        let elem = |half: usize| {
            let at = pair_start(&point, stride, "v");
            Target::Elem {
                buf: pk,
                index: vec![if half == 0 { at } else { format!("{at} + 1") }],
            }
        };
        let read = |k: &str| {
            let mut index = self.names.clone();
            index[v] = "(v0 + v)".into();
            index[r] = k.to_string();
            self.printer(index)
                .stored(access)
                .unwrap_or_else(|| "0".into())
        };
        let set = |half: usize, value: String| Stmt::Assign {
            dst: elem(half),
            op: AssignOp::Set,
            value: Value::Code(value),
        };
        let lanes = |start: &str, end: String, trip: usize, body: Vec<Stmt>| {
            Stmt::Loop(Loop {
                var: "v".into(),
                ty: IntType::Long,
                start: start.into(),
                end,
                step: Step::Inc,
                trip,
                kind: LoopKind::Serial,
                index: Some(v),
                layout: Layout::Braced,
                body,
            })
        };
        let rv = self.config.vector;
        let pad = self.edge_vector_pad();
        let ev = self.extents[v];
        // One pair of points (`tail`: the last point alone) at `i_k`.
        let pair = |tail: bool| {
            let hi = if tail {
                "0".to_string()
            } else {
                read(&format!("({name} + 1)"))
            };
            let mut body = vec![lanes(
                "0",
                "nv".into(),
                rv.min(ev),
                vec![set(0, read(&name)), set(1, hi)],
            )];
            if pad > 0 {
                body.push(lanes(
                    "nv",
                    pad.to_string(),
                    pad - ev % rv,
                    vec![set(0, "0".into()), set(1, "0".into())],
                ));
            }
            body
        };
        self.pair_loop(r, LoopKind::Serial, pair(false), pair(true))
    }

    /// The loop over pairs of points of reduction index `r` (the whole index, or with
    /// reduction blocks the current block, `k0` and `nk` in scope) of `kind` around `pair`,
    /// then `tail` at the last point where their count is odd.
    fn pair_loop(&self, r: usize, kind: LoopKind, pair: Vec<Stmt>, tail: Vec<Stmt>) -> Vec<Stmt> {
        let name = self.names[r].clone();
        let (start, end, trip) = match self.plan.block {
            Some((_, b)) => ("k0".to_string(), "k0 + nk - 1".to_string(), b / 2),
            None => {
                let e = self.extents[r];
                ("0".to_string(), (e - 1).to_string(), e / 2)
            }
        };
        let mut out = Vec::new();
        if trip > 0 {
            out.push(Stmt::Loop(Loop {
                var: name.clone(),
                ty: IntType::Long,
                start,
                end,
                step: Step::Add(2),
                trip,
                kind,
                index: Some(r),
                layout: Layout::Braced,
                body: pair,
            }));
        }
        out.extend(self.odd_point(&name, r, tail));
        out
    }

    /// `body` at the last reduction point where the point count is odd: statically without
    /// reduction blocks, else when the block's `nk` is odd.
    fn odd_point(&self, name: &str, r: usize, body: Vec<Stmt>) -> Option<Stmt> {
        let last = |at: String| Stmt::Let {
            ty: Ty::Int(IntType::Long),
            konst: true,
            defs: vec![(name.to_string(), Value::Code(at))],
        };
        match self.plan.block {
            Some(_) => {
                let mut then = vec![last("k0 + nk - 1".into())];
                then.extend(body);
                Some(Stmt::If {
                    cond: "nk & 1".into(),
                    then,
                    els: None,
                    braced: true,
                })
            }
            None if self.extents[r] % 2 == 1 => {
                let mut block = vec![last((self.extents[r] - 1).to_string())];
                block.extend(body);
                Some(Stmt::Block(block))
            }
            None => None,
        }
    }

    /// A printer of kernel expressions with `index` for the index variables and the
    /// parameters' buffer names.
    pub(super) fn printer(&self, index: Vec<String>) -> ExprPrinter<'_> {
        ExprPrinter {
            kernel: self.kernel,
            shapes: self.shapes,
            extents: self.extents,
            index,
            tensor: (0..self.kernel.params.len())
                .map(|p| self.name(BufId(p)).to_string())
                .collect(),
            output: "x".into(),
            packed: None,
        }
    }

    /// The reduction loops of a pairs tile of `nu` rows and `vectors` vectors (accumulators
    /// `c<u>_<j>` in scope): the pairs of points, then an odd last point. `at(u, j)` gives
    /// the index strings of tile row `u`, vector `j`.
    pub(super) fn pair_steps(
        &self,
        nu: usize,
        vectors: usize,
        packed: &Access,
        pk: BufId,
        at: &dyn Fn(usize, usize) -> Vec<String>,
    ) -> Vec<Stmt> {
        let Some(&r) = self.kernel.reduction().first() else {
            return Vec::new();
        };
        let Some((x, y)) = pair_product(self.kernel) else {
            return Vec::new();
        };
        let other = if x == packed { y } else { x };
        let name = self.names[r].clone();
        let stride = pack_stride(self.config.vector);
        let pk_name = self.name(pk).to_string();
        // The broadcast operand's value at row `u`, reduction index `k` (C text).
        let read = |u: usize, k: &str| {
            let mut index = at(u, 0);
            index[r] = k.to_string();
            self.printer(index)
                .stored(other)
                .unwrap_or_else(|| "0".into())
        };
        // The reduction index is the last coordinate, unit-stride, and in no other: the two
        // points are adjacent in memory.
        let contiguous = other.dims.last().and_then(|d| d.as_var()) == Some(r)
            && other.dims[..other.dims.len() - 1]
                .iter()
                .all(|d| d.terms.iter().all(|&(t, _)| t != r));
        let step = |tail: bool| {
            let point = self.reduction_point();
            let mut body = vec![Stmt::Let {
                ty: Ty::Vector(LANES),
                konst: true,
                defs: (0..vectors)
                    .map(|j| {
                        let elem = pair_start(&point, stride, &(j * LANES).to_string());
                        let load = if tail { "td_pairs_lo" } else { "td_pairs" };
                        (
                            format!("b{j}"),
                            Value::Code(format!("{load}(&{pk_name}[{elem}])")),
                        )
                    })
                    .collect(),
            }];
            if !tail {
                body.extend(self.stream_prefetch(nu, at, packed));
            }
            for u in 0..nu {
                let pair = if tail {
                    format!("(unsigned int){}", read(u, &name))
                } else if contiguous {
                    format!("td_pair(&{})", read(u, &name))
                } else {
                    format!(
                        "td_pair2({}, {})",
                        read(u, &name),
                        read(u, &format!("({name} + 1)"))
                    )
                };
                for j in 0..vectors {
                    let acc = format!("c{u}_{j}");
                    body.push(Stmt::Assign {
                        dst: Target::Var(acc.clone()),
                        op: AssignOp::Set,
                        value: Value::Code(format!("td_dot2({acc}, {pair}, b{j})")),
                    });
                }
            }
            body
        };
        self.pair_loop(r, LoopKind::InOrder, step(false), step(true))
    }
}

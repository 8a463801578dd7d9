//! The row template: kernels of several stages (softmax, layer norm, RMS norm, pooling,
//! row reductions; see [`crate::ir::Staged`]) as one pass per stage over a *row*.
//!
//! A row is one point of the **outer** indices: those the intermediates keep (the `i` of
//! `m[[i]] = max(x[[i, j]])`), or the output's indices when the kernel has no intermediate
//! (`y[[i]] = min(x[[i, j]])`, max pooling). Inside a row every intermediate is a scalar;
//! each statement is a loop over its own indices beyond the outer ones — a reduction into
//! an accumulator, or the output's elementwise loop. Kernels whose intermediates keep
//! different indices are not of this form ([`RowPlan::new`] says why) and run on the
//! reference interpreter.
//!
//! Knobs: on the CPU ([`RowsCpuConfig`]) whether rows run in parallel (OpenMP), whether
//! the loops in a row are vectorized (`omp simd` with the reduction clause), and how a
//! window reduction (pooling) is cut ([`Window`]: one reduction per output, or a vertical
//! pass into a row of columns and a horizontal one over it); on the GPU
//! ([`RowsGpuConfig`]) the threads that share a row (a power of two: a warp-level shuffle
//! reduction up to 32, then a shared-memory step across warps) and the rows per block.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::rows::{RowPlan, RowsGpuConfig};
//! let k = parse_text("rowmin", "y[[i]] = min(x[[i, j]])", None).unwrap();
//! let plan = RowPlan::new(&k, &[100, 3000]).unwrap();
//! assert_eq!((plan.outer.clone(), plan.rows), (vec![0], 100));
//! let g = RowsGpuConfig::heuristic(&plan);
//! assert!(g.validate().is_ok());
//! ```

use crate::ir::{Access, Expr, Kernel, Reducer};
use serde::{Deserialize, Serialize};

/// Where a statement's value goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Intermediate `t` (a scalar per row).
    Temp(usize),
    /// The output (after the epilogues).
    Output,
}

/// One statement inside a row.
#[derive(Clone, Debug, PartialEq)]
pub struct RowStmt<'a> {
    pub target: Target,
    /// The output's indices beyond the outer ones (only for an elementwise output).
    pub inner: Vec<usize>,
    pub reducer: Option<Reducer>,
    pub over: Vec<usize>,
    pub body: &'a Expr,
}

/// A kernel of several stages cut into rows.
#[derive(Clone, Debug, PartialEq)]
pub struct RowPlan<'a> {
    /// The outer indices, in the output's dimension order.
    pub outer: Vec<usize>,
    /// Number of rows (the product of the outer extents).
    pub rows: usize,
    /// The statements, intermediates first.
    pub stmts: Vec<RowStmt<'a>>,
    /// The longest loop inside a row (points), for the heuristics.
    pub row_len: usize,
    /// A reduction statement (index into `stmts`) whose body the output's body contains
    /// and whose points are the output's points in a row (softmax's `exp(x - m)`): its
    /// values can be kept in the output row for the output's pass ([`RowsCpuConfig::stash`]).
    /// Only for an `f32` output, a body that calls a function (storing a plain read
    /// saves nothing) and reads that stay inside their tensors.
    pub stash: Option<usize>,
    /// See [`RowPlan::across`].
    across: bool,
    /// Points of the last outer index (1 without outer indices): the lanes' line when
    /// vector lanes walk neighbouring rows.
    pub line: usize,
    /// Whether the output's pass may store with non-temporal stores
    /// ([`RowsCpuConfig::stream`]): an `f32` output written elementwise whose row is its
    /// last index alone (contiguous), of at most [`STREAM_ROW_MAX`] points.
    pub stream: bool,
    /// The window of a reduction that separates ([`RowsCpuConfig::separable`]).
    pub window: Option<Window>,
    /// The extents the plan was made for.
    pub extents: Vec<usize>,
    /// Whether every read of a plan of one statement that depends on the last outer index
    /// (the line of [`RowsCpuConfig::across`]) walks it in its last dimension: vector lanes
    /// across rows then read neighbouring elements (pooling); otherwise each lane reads a
    /// row of its own (`min(x[[i, j]])` across `i`: strided reads, which the default
    /// avoids).
    pub line_contiguous: bool,
    /// Whether every read of a plan of one statement that depends on its innermost
    /// reduction index walks it in its last dimension (`min(x[[i, j]])` over `j`; not a
    /// column sum `sum(x[[i, j]])` over `i`, which only lanes across rows read
    /// contiguously).
    pub reduction_contiguous: bool,
}

/// A window reduction over one tensor whose window separates into a **horizontal** part (the
/// reduction indices in the tensor's last, contiguous dimension, next to the line index:
/// `2 * q + s - 1`) and a **vertical** part (the other reduction indices: `2 * p + r - 1`),
/// such as max, min, sum or mean pooling: `y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1,
/// 2 * q + s - 1]])`.
///
/// Reduced in two passes per row of outputs ([`RowsCpuConfig::separable`]): the vertical
/// reduction of every input column the row's windows touch, into a small buffer of columns
/// (unit-stride reads, vectorized along the columns), then the horizontal reduction of the
/// buffer for each output (strided reads from the buffer). A column outside the tensor holds
/// the reducer's identity, so the horizontal pass has no checks; a row whose vertical window
/// reaches outside the tensor (the padding border) checks its vertical points, the others do
/// not. The body is any function of the one read (`max(relu(x[[...]]))`): it is applied in
/// the vertical pass, per input point.
///
/// ```
/// use tensor_dsl::ir::parse_text;
/// use tensor_dsl::template::rows::RowPlan;
/// let k = parse_text("pool", "let r = 0..3; let s = 0..3; \
///     y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]])", None).unwrap();
/// let plan = RowPlan::new(&k, &[1, 64, 56, 56, 3, 3]).unwrap();
/// let w = plan.window.unwrap();
/// assert_eq!((w.dim, w.lo, w.hi), (3, -1, 111));
/// assert_eq!((w.horizontal.len(), w.vertical.len()), (1, 1));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// The one read of the body.
    pub access: Access,
    /// Its dimension that the line index walks: the tensor's last.
    pub dim: usize,
    /// The reduction indices of that dimension (the horizontal window), in reduction order.
    pub horizontal: Vec<usize>,
    /// The other reduction indices (the vertical window), in reduction order.
    pub vertical: Vec<usize>,
    /// The first and last column the row's windows read (may lie outside the tensor).
    pub lo: i64,
    /// See [`Window::lo`].
    pub hi: i64,
}

/// The most columns (`f32`, on the stack) a separable window's buffer may have.
pub const WINDOW_COLUMNS_MAX: usize = 16384;

impl Window {
    /// Whether the two passes save work over one reduction per output, the analytic
    /// default's test: the vertical window has at least 2 points (else the vertical pass is
    /// a copy) and the line's stride is at most the horizontal window's span (else the
    /// vertical pass reduces columns no window reads).
    pub fn pays(&self, extents: &[usize]) -> bool {
        let vertical: usize = self.vertical.iter().map(|&v| extents[v]).product();
        let map = &self.access.dims[self.dim];
        let (mut stride, mut span) = (0i64, 1i64);
        for &(v, c) in &map.terms {
            if self.horizontal.contains(&v) {
                span += c.abs() * (extents[v] as i64 - 1);
            } else {
                stride = c.abs();
            }
        }
        vertical >= 2 && stride <= span
    }

    /// The window of a plan whose only statement reduces `body` over `over` into rows whose
    /// last outer index is `line`, if it separates (see [`Window`]).
    fn find(body: &Expr, over: &[usize], line: usize, extents: &[usize]) -> Option<Window> {
        let mut reads: Vec<&Access> = Vec::new();
        body.visit_accesses(&mut |a| reads.push(a));
        let [access] = reads.as_slice() else {
            return None;
        };
        let uses = |d: &crate::ir::Affine, v: usize| d.terms.iter().any(|&(x, c)| x == v && c != 0);
        let walking: Vec<usize> = (0..access.dims.len())
            .filter(|&d| uses(&access.dims[d], line))
            .collect();
        let [dim] = walking.as_slice() else {
            return None;
        };
        let dim = *dim;
        if dim + 1 != access.dims.len() {
            return None;
        }
        let map = &access.dims[dim];
        // The line index and reduction indices only: the columns are the same for every row.
        if !map
            .terms
            .iter()
            .all(|&(v, _)| v == line || over.contains(&v))
        {
            return None;
        }
        let horizontal: Vec<usize> = over.iter().copied().filter(|&v| uses(map, v)).collect();
        let vertical: Vec<usize> = over
            .iter()
            .copied()
            .filter(|v| !horizontal.contains(v))
            .collect();
        if horizontal.is_empty() || vertical.is_empty() {
            return None;
        }
        if access.dims[..dim]
            .iter()
            .any(|d| horizontal.iter().any(|&h| uses(d, h)))
        {
            return None;
        }
        let (lo, hi) = map.range(extents);
        let columns = usize::try_from(hi.saturating_sub(lo))
            .ok()?
            .saturating_add(17);
        if columns > WINDOW_COLUMNS_MAX {
            return None;
        }
        Some(Window {
            access: (*access).clone(),
            dim,
            horizontal,
            vertical,
            lo,
            hi,
        })
    }
}

/// The most points of an output row for streaming stores (a stashing row keeps its values
/// in a row buffer on the stack: 64 KiB).
pub const STREAM_ROW_MAX: usize = 16384;

/// Outputs of more bytes than this stream by default ([`RowsCpuConfig::heuristic`]): half
/// the 32 MiB L3 of the machine the heuristic was tuned on, so that input and output of a
/// smaller kernel stay cached for the next kernel.
pub const STREAM_BYTES: usize = 16 << 20;

/// The most points of the last outer index for vector lanes across rows.
pub const ACROSS_MAX: usize = 4096;

fn points(ids: &[usize], extents: &[usize]) -> usize {
    ids.iter().map(|&i| extents[i]).product()
}

impl<'a> RowPlan<'a> {
    /// Whether the vector lanes may walk neighbouring rows ([`RowsCpuConfig::across`]):
    /// a kernel without intermediates whose output reduces (pooling, row reductions), whose
    /// last outer index has at most [`ACROSS_MAX`] points (an accumulator array per line)
    /// and appears in reads only with a positive coefficient.
    pub fn across(&self) -> bool {
        self.across
    }

    /// The plan of `kernel` at `extents`, or why it is not of the row form.
    pub fn new(kernel: &'a Kernel, extents: &[usize]) -> Result<RowPlan<'a>, String> {
        let staged = kernel
            .staged
            .as_deref()
            .ok_or("not a kernel of several stages (the einsum templates run it)")?;
        let spatial = kernel.spatial();
        let outer: Vec<usize> = match staged.stages.first() {
            Some(first) => {
                let mut set = first.dims.clone();
                set.sort_unstable();
                for s in &staged.stages {
                    let mut d = s.dims.clone();
                    d.sort_unstable();
                    if d != set {
                        return Err(format!(
                            "intermediates `{}` and `{}` keep different indices",
                            first.name, s.name
                        ));
                    }
                }
                if !set.iter().all(|d| spatial.contains(d)) {
                    return Err(format!(
                        "intermediate `{}` keeps an index that is not on the output",
                        first.name
                    ));
                }
                spatial
                    .iter()
                    .copied()
                    .filter(|d| set.contains(d))
                    .collect()
            }
            None => spatial.clone(),
        };
        let inner: Vec<usize> = spatial
            .iter()
            .copied()
            .filter(|d| !outer.contains(d))
            .collect();
        if staged.reducer.is_some() && !inner.is_empty() {
            return Err(
                "the output's reduction keeps indices the intermediates do not keep".into(),
            );
        }
        let mut stmts: Vec<RowStmt<'a>> = staged
            .stages
            .iter()
            .enumerate()
            .map(|(t, s)| RowStmt {
                target: Target::Temp(t),
                inner: Vec::new(),
                reducer: s.reducer,
                over: s.over.clone(),
                body: &s.body,
            })
            .collect();
        stmts.push(RowStmt {
            target: Target::Output,
            inner,
            reducer: staged.reducer,
            over: staged.over.clone(),
            body: &kernel.body,
        });
        let row_len = stmts
            .iter()
            .map(|s| points(&s.inner, extents) * points(&s.over, extents))
            .max()
            .unwrap_or(1);
        let stash = stash_stage(kernel, &stmts);
        let across = match (outer.last(), stmts.as_slice()) {
            (Some(&last), [only]) if only.reducer.is_some() && extents[last] <= ACROSS_MAX => {
                let mut positive = true;
                only.body.visit_accesses(&mut |a| {
                    for map in &a.dims {
                        positive &= map.terms.iter().all(|&(v, c)| v != last || c > 0);
                    }
                });
                positive
            }
            _ => false,
        };
        // Whether every read that depends on `v` walks it in its last (contiguous)
        // dimension (the others are the same for every `v`).
        let walks_last = |st: &RowStmt<'_>, v: usize| {
            let uses = |d: &crate::ir::Affine| d.terms.iter().any(|&(x, c)| x == v && c != 0);
            let mut contiguous = true;
            st.body.visit_accesses(&mut |a| {
                contiguous &= !a.dims.iter().any(uses) || a.dims.last().is_some_and(uses);
            });
            contiguous
        };
        let (line_contiguous, reduction_contiguous) = match (outer.last(), stmts.as_slice()) {
            (Some(&last), [only]) => (
                walks_last(only, last),
                only.over.last().is_some_and(|&v| walks_last(only, v)),
            ),
            _ => (false, false),
        };
        let window = match (across, outer.last(), stmts.as_slice()) {
            (true, Some(&line), [only]) => Window::find(only.body, &only.over, line, extents),
            _ => None,
        };
        let stream = match (stmts.last(), spatial.last()) {
            (Some(out), Some(&last)) => {
                out.reducer.is_none()
                    && out.inner == [last]
                    && extents[last] <= STREAM_ROW_MAX
                    && kernel.params[kernel.output].dtype == crate::ir::DType::F32
            }
            _ => false,
        };
        Ok(RowPlan {
            line_contiguous,
            reduction_contiguous,
            extents: extents.to_vec(),
            stream,
            window,
            across,
            line: outer.last().map_or(1, |&v| extents[v]),
            rows: points(&outer, extents),
            outer,
            stmts,
            row_len,
            stash,
        })
    }
}

/// The last reduction whose body the output's elementwise body reuses (see
/// [`RowPlan::stash`]).
fn stash_stage(kernel: &Kernel, stmts: &[RowStmt<'_>]) -> Option<usize> {
    let out = stmts.last()?;
    if out.reducer.is_some()
        || out.inner.is_empty()
        || kernel.params[kernel.output].dtype != crate::ir::DType::F32
    {
        return None;
    }
    let sorted = |v: &[usize]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    let inner = sorted(&out.inner);
    stmts[..stmts.len() - 1].iter().rposition(|st| {
        st.reducer.is_some()
            && sorted(&st.over) == inner
            && has_call(st.body)
            && plain_reads(st.body)
            && contains(out.body, st.body)
    })
}

/// Whether `e` calls a built-in function.
pub fn has_call(e: &Expr) -> bool {
    match e {
        Expr::Call(..) => true,
        Expr::Neg(a) => has_call(a),
        Expr::Bin(_, a, b) => has_call(a) || has_call(b),
        _ => false,
    }
}

fn plain_reads(e: &Expr) -> bool {
    let mut plain = true;
    e.visit_accesses(&mut |a| plain &= a.dims.iter().all(|d| d.as_var().is_some()));
    plain
}

/// Whether `part` is a subexpression of `e`.
pub fn contains(e: &Expr, part: &Expr) -> bool {
    e == part
        || match e {
            Expr::Neg(a) => contains(a, part),
            Expr::Bin(_, a, b) => contains(a, part) || contains(b, part),
            Expr::Call(_, args) => args.iter().any(|a| contains(a, part)),
            _ => false,
        }
}

/// The CPU knobs of the row template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RowsCpuConfig {
    /// Rows run in parallel (`omp parallel for`).
    pub parallel: bool,
    /// Lanes of the loops in a row: 1 is scalar code; more is `omp simd simdlen(vector)`
    /// (with a reduction clause on the reductions). With 16-lane registers, 32 and 64 lanes
    /// keep 2 and 4 independent vector accumulators per reduction (the reduction split).
    pub vector: u32,
    /// Ask GCC for 512-bit vectors (it prefers 256-bit ones on AVX-512 machines).
    #[serde(default)]
    pub wide: bool,
    /// Keep a reduction's values in the output row and reuse them in the output's pass
    /// instead of computing them again (softmax: `exp(x - m)` once per element, stored by
    /// the sum's pass, then scaled in place), where [`RowPlan::stash`] finds such a stage.
    #[serde(default)]
    pub stash: bool,
    /// Vector lanes walk neighbouring rows (the last outer index) and each lane runs the
    /// whole reduction, where [`RowPlan::across`] allows it: short reductions over many
    /// rows, such as pooling windows.
    #[serde(default)]
    pub across: bool,
    /// The output's pass stores with non-temporal (streaming) stores, which bypass the
    /// caches: an output larger than the caches is then written once to memory instead of
    /// being read first (softmax over 4096×4096: 64 MB in, 64 MB out). A stashing row then
    /// keeps its values in a row buffer on the stack instead of the output row. Only where
    /// [`RowPlan::stream`] allows it; plain stores where the code is not compiled for
    /// AVX-512.
    #[serde(default)]
    pub stream: bool,
    /// With [`RowsCpuConfig::across`], a window that separates ([`RowPlan::window`]) is
    /// reduced in two passes per row of outputs: vertically into a buffer of columns, then
    /// horizontally over it ([`Window`]).
    #[serde(default)]
    pub separable: bool,
}

/// The vector lanes a CPU row configuration may take.
pub const CPU_VECTOR_CHOICES: [i64; 5] = [1, 8, 16, 32, 64];

impl Default for RowsCpuConfig {
    fn default() -> Self {
        RowsCpuConfig {
            parallel: false,
            vector: 16,
            wide: false,
            stash: false,
            across: false,
            stream: false,
            separable: false,
        }
    }
}

impl RowsCpuConfig {
    /// Parallel when there are several rows and enough work to share; vectorized with two
    /// vector accumulators (32 lanes on 512-bit registers, where the machine has them),
    /// stashing where it applies; lanes across rows for windows that separate where the
    /// two passes pay ([`Window::pays`], whatever the window's size) and other reductions
    /// whose reads walk the line contiguously ([`RowPlan::line_contiguous`]) and are
    /// shorter than 64 points or not contiguous along the reduction
    /// ([`RowPlan::reduction_contiguous`]: a column sum) (16 lanes there, 8 where that
    /// divides the line and 16 does not); streaming stores with AVX-512 where the output is
    /// larger than [`STREAM_BYTES`].
    pub fn heuristic(plan: &RowPlan<'_>) -> RowsCpuConfig {
        Self::heuristic_for(plan, crate::runtime::cpu::simd_lanes())
    }

    /// [`RowsCpuConfig::heuristic`] for a machine with `lanes` f32 lanes per register.
    pub fn heuristic_for(plan: &RowPlan<'_>, lanes: usize) -> RowsCpuConfig {
        let wide = lanes >= 16;
        let separable = plan.window.as_ref().is_some_and(|w| w.pays(&plan.extents));
        let across = plan.across()
            && (plan.line_contiguous && (plan.row_len < 64 || !plan.reduction_contiguous)
                || separable);
        let vector = if !across {
            if wide {
                32
            } else {
                16
            }
        } else if !plan.line.is_multiple_of(16) && plan.line.is_multiple_of(8) {
            // No remainder loop: a 56-point pooling line is 7 vectors of 8 (timed about 7%
            // faster than 16 lanes on the 112x112x64 pooling, one thread).
            8
        } else {
            16
        };
        RowsCpuConfig {
            parallel: plan.rows > 1 && plan.rows.saturating_mul(plan.row_len) >= 1 << 15,
            vector,
            wide,
            stash: plan.stash.is_some(),
            across,
            stream: wide
                && plan.stream
                && plan.rows.saturating_mul(plan.row_len).saturating_mul(4) > STREAM_BYTES,
            separable,
        }
    }

    /// The configuration as the CPU backend's schedule type carries it, so that records,
    /// tuning and the bench reach the row template through
    /// [`crate::template::cpu::CpuTemplate`]: the knobs are its `rows`; `parallel`,
    /// `vector` (lanes) and `wide_simd` repeat the knobs of the same meaning (the analytic
    /// features read them); the tile knobs are neutral (no axes, no unrolling, no packing).
    pub fn to_cpu_config(&self) -> crate::template::cpu::CpuConfig {
        crate::template::cpu::CpuConfig {
            vector_axis: None,
            vector: self.vector as usize,
            unroll_axis: None,
            unroll: 1,
            parallel: self.parallel,
            pack: false,
            unroll_outer: false,
            k_block: 0,
            wide_simd: self.wide,
            vector_code: 0,
            conv: None,
            rows: Some(*self),
            pairs: false,
        }
    }

    /// The row knobs of a CPU schedule: its `rows` where it has them; otherwise (an einsum
    /// schedule handed to a kernel of several stages) its tile width becomes the largest
    /// lane count of [`CPU_VECTOR_CHOICES`] not above it (at least 8; 1 stays scalar), with
    /// its `parallel` and `wide_simd`, and no stash, lanes across rows or streaming.
    pub fn from_cpu_config(c: &crate::template::cpu::CpuConfig) -> RowsCpuConfig {
        if let Some(rows) = c.rows {
            return rows;
        }
        let want = if c.vector <= 1 { 1 } else { c.vector.max(8) };
        let vector = CPU_VECTOR_CHOICES
            .iter()
            .rev()
            .find(|&&v| v as usize <= want)
            .map_or(1, |&v| v as u32);
        RowsCpuConfig {
            parallel: c.parallel,
            vector,
            wide: c.wide_simd,
            stash: false,
            across: false,
            stream: false,
            separable: false,
        }
    }

    /// Whether the knobs fit the template's rules.
    pub fn validate(&self) -> Result<(), String> {
        if !CPU_VECTOR_CHOICES.contains(&i64::from(self.vector)) {
            return Err(format!(
                "vector lanes {} are not one of {CPU_VECTOR_CHOICES:?}",
                self.vector
            ));
        }
        if self.separable && !self.across {
            return Err("a separable window needs vector lanes across rows".into());
        }
        Ok(())
    }

    /// Every configuration of the space (stash only where the plan has a stage to stash).
    pub fn all_for(plan: &RowPlan<'_>) -> Vec<RowsCpuConfig> {
        let mut out = Vec::new();
        for parallel in [false, true] {
            for &v in &CPU_VECTOR_CHOICES {
                for wide in [false, true] {
                    for stash in [false, true] {
                        for (across, separable) in [(false, false), (true, false), (true, true)] {
                            for stream in [false, true] {
                                if stash && plan.stash.is_none()
                                    || across && !plan.across()
                                    || separable && plan.window.is_none()
                                    || stream && !plan.stream
                                {
                                    continue;
                                }
                                out.push(RowsCpuConfig {
                                    parallel,
                                    vector: v as u32,
                                    wide,
                                    stash,
                                    across,
                                    stream,
                                    separable,
                                });
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// A small spread of configurations for tests: scalar and vector, serial and parallel,
    /// with and without stashing, wide vectors, streaming stores and separable windows.
    pub fn all() -> Vec<RowsCpuConfig> {
        [
            (false, 1, false, false, false, false, false),
            (false, 16, false, true, true, true, true),
            (true, 1, false, true, true, true, true),
            (true, 32, true, false, false, true, false),
            (false, 64, true, true, false, false, false),
            (true, 16, true, false, true, false, false),
            (true, 32, true, true, false, true, false),
        ]
        .into_iter()
        .map(
            |(parallel, vector, wide, stash, across, stream, separable)| RowsCpuConfig {
                parallel,
                vector,
                wide,
                stash,
                across,
                stream,
                separable,
            },
        )
        .collect()
    }
}

/// The CPU search space of the row template for one kernel at one shape: rows in parallel
/// or not, vector lanes ([`CPU_VECTOR_CHOICES`]), 512-bit vectors (only with AVX-512),
/// stashing (only where [`RowPlan::stash`] applies), vector lanes within or across rows
/// (across only where [`RowPlan::across`] allows) or across rows with the window in two
/// passes (`separable`, only where [`RowPlan::window`] finds one), streaming stores (only
/// with AVX-512, where [`RowPlan::stream`] allows). Its text form reads like
/// `parallel=parallel;vector=32;simd=wide;stash=on;lanes=within_rows;stores=cached`.
///
/// ```
/// use tensor_dsl::ir::parse_text;
/// use tensor_dsl::template::rows::{RowPlan, RowsCpuConfig, RowsCpuSpace};
/// let k = parse_text("softmax", "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
///                                y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];", None).unwrap();
/// let space = RowsCpuSpace::new(&k, &[512, 1024], 16).unwrap();
/// let default = space.decode(&space.default_point()).unwrap();
/// assert_eq!(default, RowsCpuConfig::heuristic_for(&RowPlan::new(&k, &[512, 1024]).unwrap(), 16));
/// assert!(default.stash && default.parallel);
/// assert!(!default.stream); // 2 MB stay cached
/// assert_eq!(space.space().size(), 2 * 5 * 2 * 2 * 3 * 2);
/// ```
#[derive(Clone, Debug)]
pub struct RowsCpuSpace {
    space: tuner::SearchSpace,
    default: tuner::Config,
}

impl RowsCpuSpace {
    /// The space of `kernel` at `extents` on a machine with `lanes` f32 lanes per register;
    /// an error when the kernel is not of the row form.
    pub fn new(kernel: &Kernel, extents: &[usize], lanes: usize) -> Result<RowsCpuSpace, String> {
        let plan = RowPlan::new(kernel, extents)?;
        let mut b = tuner::SearchSpace::builder();
        b.categorical("parallel", &["serial", "parallel"]);
        let vector = b.discrete("vector", &CPU_VECTOR_CHOICES);
        let simd = b.categorical("simd", &["compiler", "wide"]);
        let stash = b.categorical("stash", &["off", "on"]);
        let lanes_knob = b.categorical("lanes", &["within_rows", "across_rows", "separable"]);
        let stores = b.categorical("stores", &["cached", "streaming"]);
        let wide_ok = lanes >= 16;
        b.constraint("wide vectors need AVX-512", move |c| {
            wide_ok || c.index(simd) == Some(0)
        });
        b.constraint("scalar rows ask for no vector width", move |c| {
            c.index(vector) != Some(0) || c.index(simd) == Some(0)
        });
        let can_cross = plan.across();
        b.constraint(
            "lanes across rows need a reduction without intermediates",
            move |c| can_cross || c.index(lanes_knob) == Some(0),
        );
        let can_separate = plan.window.is_some();
        b.constraint(
            "a separable window needs a window reduction over one tensor",
            move |c| can_separate || c.index(lanes_knob) != Some(2),
        );
        let can_stash = plan.stash.is_some();
        b.constraint("stashing needs a reduction the output reuses", move |c| {
            can_stash || c.index(stash) == Some(0)
        });
        let can_stream = plan.stream && wide_ok;
        b.constraint(
            "streaming stores need AVX-512 and an output row written elementwise",
            move |c| can_stream || c.index(stores) == Some(0),
        );
        let space = b.build().map_err(|e| e.to_string())?;
        let mut t = RowsCpuSpace {
            space,
            default: tuner::Config::new(Vec::new()),
        };
        t.default = t
            .encode(&RowsCpuConfig::heuristic_for(&plan, lanes))
            .ok_or("the row template's default is not in its space")?;
        Ok(t)
    }

    /// The knobs.
    pub fn space(&self) -> &tuner::SearchSpace {
        &self.space
    }

    /// The heuristic default ([`RowsCpuConfig::heuristic_for`]) as a point.
    pub fn default_point(&self) -> tuner::Config {
        self.default.clone()
    }

    /// The configuration a point stands for.
    pub fn decode(&self, c: &tuner::Config) -> Result<RowsCpuConfig, String> {
        self.space.check(c).map_err(|e| e.to_string())?;
        let on = |k: usize| c.index(k) == Some(1);
        Ok(RowsCpuConfig {
            parallel: on(0),
            vector: self.space.discrete_value(c, 1).map_or(1, |v| v as u32),
            wide: on(2),
            stash: on(3),
            across: c.index(4).is_some_and(|i| i >= 1),
            stream: on(5),
            separable: c.index(4) == Some(2),
        })
    }

    /// The point of a configuration, if the space has it.
    pub fn encode(&self, cfg: &RowsCpuConfig) -> Option<tuner::Config> {
        let v = CPU_VECTOR_CHOICES
            .iter()
            .position(|&x| x == i64::from(cfg.vector))?;
        let c = tuner::Config::new(vec![
            tuner::Value::Categorical(usize::from(cfg.parallel)),
            tuner::Value::Discrete(v),
            tuner::Value::Categorical(usize::from(cfg.wide)),
            tuner::Value::Categorical(usize::from(cfg.stash)),
            tuner::Value::Categorical(match (cfg.across, cfg.separable) {
                (false, false) => 0,
                (true, false) => 1,
                (true, true) => 2,
                (false, true) => return None,
            }),
            tuner::Value::Categorical(usize::from(cfg.stream)),
        ]);
        self.space.is_valid(&c).then_some(c)
    }
}

/// The GPU knobs of the row template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RowsGpuConfig {
    /// Threads that share one row: a power of two, 1 to 1024.
    pub threads_per_row: u32,
    /// Rows per block; the block (`threads_per_row * rows_per_block` threads) is a multiple
    /// of 32 and at most 1024.
    pub rows_per_block: u32,
}

impl RowsGpuConfig {
    /// About 8 points of the longest row loop per thread, and blocks of at least 128
    /// threads; at most 256 threads per row where there are at least 1024 rows (blocks
    /// enough to fill an H100 or H200 eight deep: softmax over 4096 rows of 4096 ran in
    /// 95% of the time of 512 threads per row on an H200), else at most 1024. Rows of at
    /// most 16 points (pooling windows) take one thread each, 256 rows per block: 3×3
    /// max pooling over 112×112×64 ran 2.5 times as fast as with 2 threads per row.
    pub fn heuristic(plan: &RowPlan<'_>) -> RowsGpuConfig {
        if plan.row_len <= 16 {
            return RowsGpuConfig {
                threads_per_row: 1,
                rows_per_block: 256,
            };
        }
        let most = if plan.rows >= 1024 { 256 } else { 1024 };
        let per = plan.row_len.div_ceil(8).clamp(1, most);
        let t = per.next_power_of_two().min(most) as u32;
        let rows_per_block = (128 / t).max(1);
        RowsGpuConfig {
            threads_per_row: t,
            rows_per_block,
        }
    }

    /// Threads per block.
    pub fn block(&self) -> u32 {
        self.threads_per_row * self.rows_per_block
    }

    /// Whether the knobs fit the template's rules.
    pub fn validate(&self) -> Result<(), String> {
        let t = self.threads_per_row;
        if !t.is_power_of_two() || t > 1024 {
            return Err(format!(
                "threads per row {t} is not a power of two up to 1024"
            ));
        }
        let b = u64::from(t) * u64::from(self.rows_per_block);
        if self.rows_per_block == 0 || b % 32 != 0 || b > 1024 {
            return Err(format!(
                "a block of {t} x {} threads is not a multiple of 32 up to 1024",
                self.rows_per_block
            ));
        }
        Ok(())
    }

    /// Every valid configuration (threads per row 1..1024, blocks of 32..1024 threads).
    pub fn all() -> Vec<RowsGpuConfig> {
        let mut out = Vec::new();
        for t in (0..=10).map(|e| 1u32 << e) {
            for r in (0..=10).map(|e| 1u32 << e) {
                let c = RowsGpuConfig {
                    threads_per_row: t,
                    rows_per_block: r,
                };
                if c.validate().is_ok() {
                    out.push(c);
                }
            }
        }
        out
    }
}

/// The values the GPU knobs take (threads per row, rows per block): powers of two up to
/// 1024.
pub const GPU_CHOICES: [i64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// The GPU search space of the row template for one kernel at one shape: threads per row
/// and rows per block ([`GPU_CHOICES`]), blocks of 32 to 1024 threads in whole warps, and
/// no more threads per row than the longest row loop has points (rounded up to a power of
/// two, at least a warp): more would only idle. The default is
/// [`RowsGpuConfig::heuristic`]. [`crate::template::gpu::GpuTemplate`] offers it for a
/// kernel of several stages, so GPU tuning (`tensor-dsl tune`, the bench) searches it.
///
/// ```
/// use tensor_dsl::ir::parse_text;
/// use tensor_dsl::template::rows::{RowPlan, RowsGpuConfig, RowsGpuSpace};
/// let k = parse_text("rowmin", "y[[i]] = min(x[[i, j]])", None).unwrap();
/// let space = RowsGpuSpace::new(&k, &[100, 3000]).unwrap();
/// let default = space.decode(&space.default_point()).unwrap();
/// assert_eq!(default, RowsGpuConfig::heuristic(&RowPlan::new(&k, &[100, 3000]).unwrap()));
/// let mut rng = rand::thread_rng();
/// let point = space.space().sample_uniform(&mut rng).unwrap();
/// assert!(space.decode(&point).unwrap().validate().is_ok());
/// ```
#[derive(Clone, Debug)]
pub struct RowsGpuSpace {
    space: tuner::SearchSpace,
    default: tuner::Config,
}

impl RowsGpuSpace {
    /// The space of `kernel` at `extents`; an error when the kernel is not of the row form.
    pub fn new(kernel: &Kernel, extents: &[usize]) -> Result<RowsGpuSpace, String> {
        let plan = RowPlan::new(kernel, extents)?;
        let mut b = tuner::SearchSpace::builder();
        let t = b.discrete("threads_per_row", &GPU_CHOICES);
        let r = b.discrete("rows_per_block", &GPU_CHOICES);
        let value = |c: &tuner::Config, k: usize| c.index(k).map_or(0, |i| GPU_CHOICES[i]);
        b.constraint("a block is whole warps, at most 1024 threads", move |c| {
            let block = value(c, t) * value(c, r);
            block % 32 == 0 && (32..=1024).contains(&block)
        });
        let most = plan.row_len.next_power_of_two().max(32) as i64;
        b.constraint(
            "no more threads per row than the row has points",
            move |c| value(c, t) <= most,
        );
        let space = b.build().map_err(|e| e.to_string())?;
        let mut s = RowsGpuSpace {
            space,
            default: tuner::Config::new(Vec::new()),
        };
        s.default = s
            .encode(&RowsGpuConfig::heuristic(&plan))
            .ok_or("the row template's GPU default is not in its space")?;
        Ok(s)
    }

    /// The knobs.
    pub fn space(&self) -> &tuner::SearchSpace {
        &self.space
    }

    /// The heuristic default ([`RowsGpuConfig::heuristic`]) as a point.
    pub fn default_point(&self) -> tuner::Config {
        self.default.clone()
    }

    /// The configuration a point stands for.
    pub fn decode(&self, c: &tuner::Config) -> Result<RowsGpuConfig, String> {
        self.space.check(c).map_err(|e| e.to_string())?;
        let knob = |k: usize| {
            self.space
                .discrete_value(c, k)
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| format!("knob {k} has no value"))
        };
        Ok(RowsGpuConfig {
            threads_per_row: knob(0)?,
            rows_per_block: knob(1)?,
        })
    }

    /// The point of a configuration, if the space has it.
    pub fn encode(&self, cfg: &RowsGpuConfig) -> Option<tuner::Config> {
        let at = |v: u32| GPU_CHOICES.iter().position(|&x| x == i64::from(v));
        let c = tuner::Config::new(vec![
            tuner::Value::Discrete(at(cfg.threads_per_row)?),
            tuner::Value::Discrete(at(cfg.rows_per_block)?),
        ]);
        self.space.is_valid(&c).then_some(c)
    }
}

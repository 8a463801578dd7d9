//! C and CUDA C for the row template ([`crate::template::rows`]): kernels of several
//! stages (softmax, layer norm, RMS norm, pooling, row reductions).
//!
//! These are printed directly rather than through [`crate::lower::Nest`]: a row's
//! intermediates are scalars carried from one statement's loop to the next, and the GPU
//! form reduces across the threads of a row (warp shuffles, then shared memory), neither of
//! which the nest has a statement for yet. The scalar arithmetic, tensor reads and element
//! type conversions are the shared ones of [`super::ExprPrinter`], so both backends compute
//! exactly what the one-statement kernels compute.
//!
//! Both entry points follow the conventions of the other generators: C exports
//! `void td_kernel(const void *const *args, void *out)`; CUDA exports
//! `extern "C" __global__ void td_kernel(inputs..., out)` on a one-dimensional grid.
//!
//! ```
//! use tensor_dsl::codegen::rows;
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::rows::{RowPlan, RowsCpuConfig, RowsGpuConfig};
//! let k = parse_text("softmax", "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
//!                                y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];", None).unwrap();
//! let shapes: [&[usize]; 2] = [&[4, 100], &[4, 100]];
//! let plan = RowPlan::new(&k, &[4, 100]).unwrap();
//! let c = rows::generate_c(&k, &[4, 100], &shapes, &RowsCpuConfig::heuristic(&plan)).unwrap();
//! assert!(c.contains("reduction(max:td_acc)"));
//! let g = rows::generate_cuda(&k, &[4, 100], &shapes, &RowsGpuConfig::heuristic(&plan)).unwrap();
//! // 16 threads per row reduce with shuffles; each holds its 7 points of `x` in registers.
//! assert!(g.source.contains("__shfl_xor_sync"));
//! assert!(g.source.contains("float td_c0[7];"));
//! ```

use super::cuda::CudaSource;
use super::{
    bound_checks, builtin_prelude, dtype_prelude, float_lit, index_name, load_as_f32, offset_expr,
    storage_type, store_from_f32, used_builtins_prelude, Coord, ExprPrinter,
};
use crate::ir::{Access, BinOp, Expr, Func, Kernel, Reducer};
use crate::template::rows::{RowPlan, RowStmt, RowsCpuConfig, RowsGpuConfig, Target};
use std::fmt::Write as _;

mod ahead;
mod reduce;
mod registers;
mod window;

/// Version of the row template's generated code; part of compiled-artifact keys.
pub const CODEGEN_VERSION: u32 = 5;

/// Name of the entry point (as in the other generators).
pub const ENTRY: &str = "td_kernel";

struct Printer<'a> {
    kernel: &'a Kernel,
    shapes: &'a [&'a [usize]],
    extents: &'a [usize],
    expr: ExprPrinter<'a>,
}

impl<'a> Printer<'a> {
    fn new(kernel: &'a Kernel, extents: &'a [usize], shapes: &'a [&'a [usize]]) -> Self {
        let expr = ExprPrinter {
            kernel,
            shapes,
            extents,
            index: (0..kernel.indices.len())
                .map(|i| index_name(kernel, i))
                .collect(),
            tensor: (0..kernel.params.len()).map(|p| format!("t{p}")).collect(),
            output: "td_v".into(),
            packed: None,
        };
        Printer {
            kernel,
            shapes,
            extents,
            expr,
        }
    }

    fn coords(&self, a: &Access) -> Vec<Coord> {
        a.dims
            .iter()
            .map(|map| {
                let (lo, hi) = map.range(self.extents);
                let mut expr = String::new();
                map.write(&mut expr, &|v| index_name(self.kernel, v));
                Coord {
                    expr,
                    simple: map.as_var().is_some() || map.terms.is_empty(),
                    lo,
                    hi,
                }
            })
            .collect()
    }

    /// The conditions under which every access of `body` is inside its tensor (empty when
    /// none can fall outside).
    fn inside(&self, body: &Expr) -> Vec<String> {
        let mut conds: Vec<String> = Vec::new();
        body.visit_accesses(&mut |a| {
            for c in bound_checks(self.shapes[a.tensor], &self.coords(a)) {
                if !conds.contains(&c) {
                    conds.push(c);
                }
            }
        });
        conds
    }

    /// `body` with reads not checked (the caller checked [`Printer::inside`]).
    fn unchecked(&self, body: &Expr) -> String {
        self.expr.expr_with(body, &|a| Some(self.load(a)))
    }

    /// The read `a` as `f32`, not checked.
    fn load(&self, a: &Access) -> String {
        load_as_f32(
            self.kernel.params[a.tensor].dtype,
            &format!(
                "t{}[{}]",
                a.tensor,
                offset_expr(self.shapes[a.tensor], &self.coords(a))
            ),
        )
    }

    /// `td_v = epilogue(td_v); ...; out[offset] = td_v;` (the output's indices are set).
    fn store(&self, s: &mut String, ind: &str) {
        for e in &self.kernel.epilogue {
            let _ = writeln!(s, "{ind}td_v = {};", self.expr.expr(e));
        }
        let _ = writeln!(
            s,
            "{ind}out[{}] = {};",
            self.out_offset(),
            store_from_f32(self.kernel.params[self.kernel.output].dtype, "td_v")
        );
    }

    /// The output element's offset (the output's indices are set).
    fn out_offset(&self) -> String {
        let out = self.kernel.output;
        let coords: Vec<Coord> = self
            .kernel
            .spatial()
            .iter()
            .map(|&v| Coord {
                expr: index_name(self.kernel, v),
                simple: true,
                lo: 0,
                hi: self.extents[v] as i64 - 1,
            })
            .collect();
        offset_expr(self.shapes[out], &coords)
    }

    fn points(&self, ids: &[usize]) -> usize {
        ids.iter().map(|&i| self.extents[i]).product()
    }

    /// `const long i_j = td_p / 7 % 5;` for each of `ids`, decomposing the flat `flat`.
    fn decompose(&self, s: &mut String, ind: &str, ids: &[usize], flat: &str) {
        let mut stride = self.points(ids);
        for (n, &v) in ids.iter().enumerate() {
            stride /= self.extents[v].max(1);
            let mut e = flat.to_string();
            if stride > 1 {
                let _ = write!(e, " / {stride}");
            }
            if n > 0 {
                let _ = write!(e, " % {}", self.extents[v]);
            }
            let _ = writeln!(s, "{ind}const long {} = {e};", index_name(self.kernel, v));
        }
    }
}

/// `expf` as straight-line code the compiler can vectorize (glibc's vector `expf` is only
/// declared under `-ffast-math`, so `expf` in a loop is a scalar call per element).
///
/// - The argument is clamped to [−87.5, 89] on its bits, as integers (unsigned for the
///   lower bound, where negative floats order by magnitude; signed for the upper one):
///   GCC turns integer clamps into one `vpminud`/`vpminsd` each, where a float clamp
///   becomes compares and blends (it keeps NaN's semantics); NaN is put back at the end.
/// - `n = round(x / ln 2)`: adding 1.5·2^23 + 126 leaves `n + 126` in the low bits of the
///   sum, so the scale 2^(n−1) is those bits shifted into the exponent field (no rounding
///   or conversion instruction).
/// - `r = x − n·ln 2` in two steps (ln 2 split in a high and a low part), then a degree-5
///   minimax polynomial (XNNPACK's `rr2-p5` coefficients, doubled: exactly `2·exp(r)`'s
///   rounding scaled by 2): within 1.7e−7 relative error on [−86.5, ln(FLT_MAX)]; the
///   result is `2^(n−1)·(2·exp(r))`, one multiplication by the scale (9 multiplications
///   and FMAs per element, the ports that bound this loop on AVX-512: the form
///   `(r·s·p + s)·2` had 10).
///
/// Above ln(FLT_MAX) the product overflows to +∞ by itself; where n would leave the
/// normal range (below about −87) the scale is 0 (exp(−87) < 2e−38). About 35% fewer
/// cycles per element than the Cephes form it replaces (16 lanes, one thread, side by
/// side). GCC if-converts the NaN select only without trapping math, which the pragma
/// turns off for this file (no floating-point trap is ever enabled).
pub const VECTOR_EXP_PRELUDE: &str = "\
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize(\"no-trapping-math\")
#endif
static inline float td_vexpf(float x) {
    union { float f; unsigned u; int i; } c, b, s;
    c.f = x;
    c.u = c.u > 0xC2AF0000u ? 0xC2AF0000u : c.u; /* below -87.5 (and -inf): -87.5 */
    c.i = c.i > 0x42B20000 ? 0x42B20000 : c.i; /* above 89 (and +inf): 89 */
    b.f = c.f * 0x1.715476p+0f + 0x1.8000FCp23f; /* 1.5 * 2^23 + 126 + round(c / ln 2) */
    const float n = b.f - 0x1.8000FCp23f;
    s.u = b.u << 23; /* 2^(n-1): n + 126 stays in 0..254 */
    float r = c.f - n * 0x1.62E400p-1f;
    r = r - n * 0x1.7F7D1Cp-20f;
    float p = 0x1.0F9F9Cp-6f * r + 0x1.573A1Ap-4f;
    p = p * r + 0x1.555A80p-2f;
    p = p * r + 0x1.FFFDC6p-1f;
    p = p * r + 0x1.FFFFF6p+0f;
    p = p * r + 2.0f; /* 2 exp(r) */
    const float e = p * s.f;
    return x != x ? x : e;
}
";

/// Scalar rows (`vector` 1) are compiled without GCC's auto-vectorizer: the knob asks for
/// scalar code, and GCC 12.2 at `-O3` (AVX2 or AVX-512) vectorizes some serial scalar rows
/// wrongly on its own. With `m[[i]] = max(x[[i + 1, j]]); y[[i, j]] = x[[i, j]] - m[[i]]`
/// over 3x4 (a reduction whose reads are checked against the row index), it fuses the rows'
/// loops into vectors that take a different maximum in each lane; `tests/rows_variants.rs`
/// keeps that case.
const SCALAR_PRELUDE: &str = "\
/* Scalar rows: no auto-vectorization (GCC 12 miscompiles some serial scalar rows it
   vectorizes by itself). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize(\"no-tree-vectorize\")
#endif

";

/// The accumulator update `acc = combine(acc, x)` (NaN values are skipped by `max`/`min`,
/// as `fmaxf` does).
fn combine(r: Reducer, acc: &str, x: &str) -> String {
    match r {
        Reducer::Sum | Reducer::Mean => format!("{acc} += {x};"),
        Reducer::Prod => format!("{acc} *= {x};"),
        Reducer::Max => {
            format!("{{ const float td_x = {x}; {acc} = td_x > {acc} ? td_x : {acc}; }}")
        }
        Reducer::Min => {
            format!("{{ const float td_x = {x}; {acc} = td_x < {acc} ? td_x : {acc}; }}")
        }
    }
}

/// Two accumulators combined (the cross-thread step on the GPU).
fn merge(r: Reducer, a: &str, b: &str) -> String {
    match r {
        Reducer::Sum | Reducer::Mean => format!("{a} + {b}"),
        Reducer::Prod => format!("{a} * {b}"),
        Reducer::Max => format!("({b} > {a} ? {b} : {a})"),
        Reducer::Min => format!("({b} < {a} ? {b} : {a})"),
    }
}

fn omp_op(r: Reducer) -> &'static str {
    match r {
        Reducer::Sum | Reducer::Mean => "+",
        Reducer::Prod => "*",
        Reducer::Max => "max",
        Reducer::Min => "min",
    }
}

/// The reduced value of `td_acc` (the mean divides by the number of points).
fn finish(r: Reducer, count: usize) -> String {
    match r {
        Reducer::Mean => format!("td_acc * {}", float_lit(1.0 / count as f64)),
        _ => "td_acc".into(),
    }
}

fn header(s: &mut String, kernel: &Kernel, extents: &[usize], what: &str, schedule: &str) {
    let _ = writeln!(
        s,
        "/* tensor-dsl generated {what} (row template, codegen v{CODEGEN_VERSION})"
    );
    let _ = writeln!(
        s,
        " * kernel `{}` fingerprint {}",
        kernel.name,
        kernel.fingerprint()
    );
    let _ = writeln!(s, " *   {}", kernel.to_string().replace("*/", "* /"));
    let _ = writeln!(s, " * extents: {}", super::extents_text(kernel, extents));
    let _ = writeln!(s, " * schedule: {schedule}");
    let _ = writeln!(s, " */");
}

fn temps_decl(s: &mut String, ind: &str, plan: &RowPlan<'_>) {
    let temps: Vec<String> = plan
        .stmts
        .iter()
        .filter_map(|st| match st.target {
            Target::Temp(t) => Some(format!("td_t{t} = 0.0f")),
            Target::Output => None,
        })
        .collect();
    if !temps.is_empty() {
        let _ = writeln!(s, "{ind}float {};", temps.join(", "));
    }
}

/// C for the CPU: rows in an (optionally parallel) loop, one loop nest per statement in a
/// row, vectorized with `omp simd` when `config.vector`.
pub fn generate_c(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &RowsCpuConfig,
) -> Result<String, String> {
    let plan = RowPlan::new(kernel, extents)?;
    let p = Printer::new(kernel, extents, shapes);
    let mut s = String::new();
    header(
        &mut s,
        kernel,
        extents,
        "C",
        &format!(
            "{} rows {}, {}{}{}{}{}",
            plan.rows,
            if config.parallel {
                "in parallel"
            } else {
                "in order"
            },
            if config.vector > 1 {
                format!("vectorized ({} lanes)", config.vector)
            } else {
                "scalar".into()
            },
            if config.wide { ", 512-bit vectors" } else { "" },
            if streaming(&plan, config) {
                ", streaming stores"
            } else {
                ""
            },
            match separable(&plan, config) {
                Some(_) => ", vector lanes across rows, the window in two passes",
                None if config.across && plan.across() => ", vector lanes across rows",
                None => "",
            },
            match (stashing(&plan, config).is_some(), streaming(&plan, config)) {
                (true, true) => ", reduction values kept in a row buffer",
                (true, false) => ", reduction values kept in the output row",
                _ => "",
            },
        ),
    );
    config.validate()?;
    s.push_str("#include <math.h>\n\n");
    if config.vector <= 1 {
        s.push_str(SCALAR_PRELUDE);
    }
    if config.wide && config.vector > 1 {
        s.push_str(
            "/* 512-bit vectors: GCC prefers 256-bit ones on AVX-512 machines by default. */\n\
             #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__AVX512F__)\n\
             #pragma GCC target(\"prefer-vector-width=512\")\n\
             #endif\n\n",
        );
    }
    s.push_str(&builtin_prelude(""));
    s.push_str(&used_builtins_prelude(kernel, ""));
    s.push_str(&dtype_prelude(kernel, ""));
    let uses_exp = {
        let mut uses = false;
        let mut check = |e: &Expr| uses |= calls(e, Func::Exp);
        kernel.stages().iter().for_each(|st| check(&st.body));
        check(&kernel.body);
        kernel.epilogue.iter().for_each(&mut check);
        uses
    };
    if uses_exp && config.vector > 1 {
        s.push_str(VECTOR_EXP_PRELUDE);
    }
    if streaming(&plan, config) {
        s.push_str(STREAM_PRELUDE);
    }
    let body_start = s.len();
    s.push_str("\nvoid td_kernel(const void *const *args, void *td_out) {\n");
    for p_id in kernel.inputs() {
        let ty = storage_type(kernel.params[p_id].dtype);
        let _ = writeln!(
            s,
            "    const {ty} *restrict t{p_id} = (const {ty} *)args[{p_id}];"
        );
    }
    let _ = writeln!(
        s,
        "    {ty} *restrict out = ({ty} *)td_out;",
        ty = storage_type(kernel.params[kernel.output].dtype)
    );
    if let Some(w) = separable(&plan, config) {
        s.insert_str(body_start, ahead::PREFETCH_PRELUDE);
        s.insert_str(body_start, window::ALIGN_PRELUDE);
        window::c_separable(&mut s, &p, &plan, w, config);
    } else if config.across && plan.across() {
        s.insert_str(body_start, DIV_PRELUDE);
        c_across(&mut s, &p, &plan, config);
    } else {
        let ahead = ahead::Ahead::of(&p, &plan);
        if !ahead.prefetch.is_empty() {
            s.insert_str(body_start, ahead::PREFETCH_PRELUDE);
        }
        if plan
            .stmts
            .iter()
            .any(|st| reduce::Blocks::of(&p, st, config).is_some())
        {
            s.insert_str(body_start, reduce::VECTOR_PRELUDE);
        }
        c_rows(&mut s, &p, &plan, config, &ahead);
    }
    s.push_str("}\n");
    if uses_exp && config.vector > 1 {
        // The shared expression printer spells `exp` as `expf`; in a vectorized row it is
        // the vectorizable one.
        let body = s.split_off(body_start).replace("expf(", "td_vexpf(");
        s.push_str(&body);
    }
    Ok(s)
}

/// A row's vector lanes walk the points of the last outer index (neighbouring rows), for
/// short reductions over many rows (pooling windows), where a row alone is too short to
/// vectorize. First the lanes whose every read falls inside its tensor for every
/// reduction point are found (a range, from the affine reads); those run with the
/// reduction loops inside the lane loop, unrolled where they have at most 8 points, so
/// the accumulator stays in a register, the reads are plain (strided) loads and there is
/// no check; the lanes before and after that range (the padding border) check each read.
fn c_across(s: &mut String, p: &Printer<'_>, plan: &RowPlan<'_>, config: &RowsCpuConfig) {
    let Some((&last, prefix)) = plan.outer.split_last() else {
        return;
    };
    let st = &plan.stmts[0];
    let Some(r) = st.reducer else {
        return;
    };
    let groups = p.points(prefix);
    let lanes = p.extents[last];
    let q = index_name(p.kernel, last);
    if config.parallel && groups > 1 {
        s.push_str("    #pragma omp parallel for schedule(static)\n");
    }
    let _ = writeln!(
        s,
        "    for (long td_row = 0; td_row < {groups}; ++td_row) {{ /* {lanes} rows along {} in vector lanes */",
        p.kernel.indices[last].name
    );
    p.decompose(s, "        ", prefix, "td_row");
    // Uniform checks (reads whose coordinate does not move with the lanes) and the lane
    // range of the others.
    let mut uniform: Vec<String> = Vec::new();
    let mut bounds: Vec<(String, String)> = Vec::new();
    st.body.visit_accesses(&mut |a| {
        let shape = p.shapes[a.tensor];
        for (map, &n) in a.dims.iter().zip(shape) {
            let (lo, hi) = map.range(p.extents);
            if lo >= 0 && hi < n as i64 {
                continue;
            }
            let coef = map
                .terms
                .iter()
                .filter(|(v, _)| *v == last)
                .map(|(_, c)| *c)
                .sum::<i64>();
            let mut rest = map.clone();
            rest.terms.retain(|(v, _)| *v != last);
            let mut b = String::new();
            rest.write(&mut b, &|v| index_name(p.kernel, v));
            if coef == 0 {
                for c in [format!("{b} >= 0"), format!("{b} < {n}")] {
                    if !uniform.contains(&c) {
                        uniform.push(c);
                    }
                }
            } else {
                // 0 <= coef * q + b < n, coef > 0 (RowPlan::across checks the sign).
                let lo = format!("td_cdiv(-({b}), {coef})");
                let hi = format!("td_fdiv({} - ({b}), {coef}) + 1", n as i64 - 1);
                if !bounds.contains(&(lo.clone(), hi.clone())) {
                    bounds.push((lo, hi));
                }
            }
        }
    });
    let window = |s: &mut String, depth: usize, unroll: bool| -> usize {
        let mut d = depth;
        for &v in &st.over {
            let ind = "    ".repeat(d);
            let n = p.extents[v];
            if unroll && n <= 8 {
                let _ = writeln!(s, "{ind}#pragma GCC unroll {n}");
            }
            let name = index_name(p.kernel, v);
            let _ = writeln!(s, "{ind}for (long {name} = 0; {name} < {n}; ++{name}) {{");
            d += 1;
        }
        d
    };
    let _ = writeln!(
        s,
        "        /* {} over {}: lanes [td_lo, td_hi) read inside their tensors at every point */",
        r.name(),
        names(p.kernel, &st.over)
    );
    let _ = writeln!(s, "        long td_lo = 0, td_hi = {lanes};");
    if !uniform.is_empty() || !bounds.is_empty() {
        let d = window(s, 2, false);
        let ind = "    ".repeat(d);
        if !uniform.is_empty() {
            let _ = writeln!(s, "{ind}if (!({})) td_lo = {lanes};", uniform.join(" && "));
        }
        for (lo, hi) in &bounds {
            let _ = writeln!(
                s,
                "{ind}{{ const long td_l = {lo}; if (td_l > td_lo) td_lo = td_l; }}"
            );
            let _ = writeln!(
                s,
                "{ind}{{ const long td_h = {hi}; if (td_h < td_hi) td_hi = td_h; }}"
            );
        }
        close_loops(s, d, 2);
        let _ = writeln!(s, "        if (td_lo > {lanes}) td_lo = {lanes};");
        let _ = writeln!(s, "        if (td_hi < td_lo) td_hi = td_lo;");
    }
    let value = finish(r, p.points(&st.over));
    let conds = p.inside(st.body);
    let lane = |s: &mut String, from: &str, to: &str, inner: bool| {
        if inner && config.vector > 1 {
            let _ = writeln!(s, "        #pragma omp simd simdlen({})", config.vector);
        }
        let _ = writeln!(s, "        for (long {q} = {from}; {q} < {to}; ++{q}) {{");
        let _ = writeln!(s, "            float td_acc = {};", float_lit(r.identity()));
        let d = window(s, 3, inner);
        let ind = "    ".repeat(d);
        let update = combine(r, "td_acc", &p.unchecked(st.body));
        if inner || conds.is_empty() {
            let _ = writeln!(s, "{ind}{update}");
        } else {
            let _ = writeln!(s, "{ind}if ({}) {update}", conds.join(" && "));
        }
        close_loops(s, d, 3);
        let _ = writeln!(s, "            float td_v = {value};");
        p.store(s, "            ");
        let _ = writeln!(s, "        }}");
    };
    if bounds.is_empty() && uniform.is_empty() {
        lane(s, "0", &lanes.to_string(), true);
    } else {
        lane(s, "0", "td_lo", false);
        lane(s, "td_lo", "td_hi", true);
        lane(s, "td_hi", &lanes.to_string(), false);
    }
    s.push_str("    }\n");
}

/// Floor and ceiling division by a positive divisor (C's `/` truncates toward zero), for
/// the lane ranges of [`c_across`].
const DIV_PRELUDE: &str = "\
static inline long td_fdiv(long x, long d) { return x >= 0 ? x / d : -((-x + d - 1) / d); }
static inline long td_cdiv(long x, long d) { return x >= 0 ? (x + d - 1) / d : -((-x) / d); }
";

/// One row after another (in parallel when `config.parallel`), each statement a loop over
/// the row.
fn c_rows(
    s: &mut String,
    p: &Printer<'_>,
    plan: &RowPlan<'_>,
    config: &RowsCpuConfig,
    ahead: &ahead::Ahead,
) {
    if config.parallel && plan.rows > 1 {
        s.push_str("    #pragma omp parallel for schedule(static)\n");
    }
    let _ = writeln!(
        s,
        "    for (long td_row = 0; td_row < {}; ++td_row) {{",
        plan.rows
    );
    let ind = "        ";
    p.decompose(s, ind, &plan.outer, "td_row");
    temps_decl(s, ind, plan);
    for d in &ahead.decls {
        let _ = writeln!(s, "{ind}{d}");
    }
    let stash = stashing(plan, config);
    let stream = streaming(plan, config);
    let line = plan.stmts.last().map_or(1, |st| p.points(&st.inner));
    if stream && stash.is_some() {
        let _ = writeln!(s, "{ind}float td_buf[{line}];");
    }
    for (n, st) in plan.stmts.iter().enumerate() {
        c_stmt(
            s,
            p,
            st,
            config,
            stash
                .filter(|&(at, _)| at == n || st.target == Target::Output)
                .map(|(_, body)| Stash {
                    body,
                    buffer: stream,
                    index: p.kernel.spatial().last().copied().unwrap_or(0),
                }),
            stream,
            &ahead.prefetch,
        );
    }
    s.push_str("    }\n");
}

/// Whether `e` reads no tensor and no output (the same value everywhere in a row).
fn row_invariant(e: &Expr) -> bool {
    let mut reads = false;
    e.visit_accesses(&mut |_| reads = true);
    !reads && !matches!(e, Expr::Output) && !mentions_output(e)
}

fn mentions_output(e: &Expr) -> bool {
    match e {
        Expr::Output => true,
        Expr::Neg(a) => mentions_output(a),
        Expr::Bin(_, a, b) => mentions_output(a) || mentions_output(b),
        Expr::Call(_, args) => args.iter().any(mentions_output),
        _ => false,
    }
}

/// Whether `e` calls `f`.
fn calls(e: &Expr, f: Func) -> bool {
    match e {
        Expr::Lit(_) | Expr::Access(_) | Expr::Output | Expr::Temp(_) => false,
        Expr::Neg(a) => calls(a, f),
        Expr::Bin(_, a, b) => calls(a, f) || calls(b, f),
        Expr::Call(g, args) => *g == f || args.iter().any(|a| calls(a, f)),
    }
}

/// The row template's C for a kernel of several stages reached through the einsum CPU
/// template's entry points ([`super::c::generate`], so tools written against them work):
/// its knobs as [`RowsCpuConfig::from_cpu_config`] reads them.
pub fn c_for_einsum_config(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &crate::template::cpu::CpuConfig,
) -> Result<String, String> {
    generate_c(
        kernel,
        extents,
        shapes,
        &RowsCpuConfig::from_cpu_config(config),
    )
}

/// The row template's CUDA with its heuristic knobs, for a kernel of several stages reached
/// through [`super::cuda::generate`] (whose GPU schedule does not apply to it).
pub fn cuda_with_heuristic(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
) -> Result<CudaSource, String> {
    let plan = RowPlan::new(kernel, extents)?;
    generate_cuda(kernel, extents, shapes, &RowsGpuConfig::heuristic(&plan))
}

/// Opens `for` loops over `ids` (the last one `omp simd simdlen(vector)` with `clause` when
/// `vector > 1`); returns the indentation inside.
fn open_loops(
    s: &mut String,
    p: &Printer<'_>,
    ids: &[usize],
    vector: u32,
    clause: &str,
    depth: usize,
) -> usize {
    let mut d = depth;
    for (n, &v) in ids.iter().enumerate() {
        let ind = "    ".repeat(d);
        if vector > 1 && n + 1 == ids.len() {
            let _ = writeln!(s, "{ind}#pragma omp simd simdlen({vector}){clause}");
        }
        let name = index_name(p.kernel, v);
        let _ = writeln!(
            s,
            "{ind}for (long {name} = 0; {name} < {}; ++{name}) {{",
            p.extents[v]
        );
        d += 1;
    }
    d
}

fn close_loops(s: &mut String, from: usize, to: usize) {
    for d in (to..from).rev() {
        let _ = writeln!(s, "{}}}", "    ".repeat(d));
    }
}

/// Non-temporal 16-float stores (GCC's AVX-512 builtins; plain stores elsewhere) and the
/// fence that orders them before the kernel returns.
const STREAM_PRELUDE: &str = "\
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__AVX512F__)
typedef float td_v16 __attribute__((vector_size(64)));
static inline void td_stream16(float *p, const float *w) {
    td_v16 v;
    __builtin_memcpy(&v, w, 64);
    __builtin_ia32_movntps512(p, v);
}
static inline void td_sfence(void) { __builtin_ia32_sfence(); }
#else
static inline void td_stream16(float *p, const float *w) {
    for (int l = 0; l < 16; ++l) p[l] = w[l];
}
static inline void td_sfence(void) {}
#endif
";

/// The window a configuration reduces in two passes, if any (the knob, where the plan has
/// such a window).
fn separable<'p>(
    plan: &'p RowPlan<'_>,
    config: &RowsCpuConfig,
) -> Option<&'p crate::template::rows::Window> {
    plan.window
        .as_ref()
        .filter(|_| config.separable && config.across && plan.across())
}

/// Whether the output's pass streams (the knob, where the plan allows it).
fn streaming(plan: &RowPlan<'_>, config: &RowsCpuConfig) -> bool {
    config.stream && plan.stream && !(config.across && plan.across())
}

/// Where a stashing row keeps its values (see [`c_stmt`]).
#[derive(Clone, Copy)]
struct Stash<'a> {
    /// Its body (replaced by the kept value in the output's body).
    body: &'a Expr,
    /// In the row buffer `td_buf` (indexed by the output's last index, the row of a
    /// streaming output) rather than the output row.
    buffer: bool,
    /// The output's last index.
    index: usize,
}

impl Stash<'_> {
    /// The kept value of the current point.
    fn slot(&self, p: &Printer<'_>) -> String {
        if self.buffer {
            format!("td_buf[{}]", index_name(p.kernel, self.index))
        } else {
            format!("out[{}]", p.out_offset())
        }
    }
}

/// The stage whose values are kept in the output row, and its body, when `config` stashes
/// and the plan has such a stage.
fn stashing<'a>(plan: &RowPlan<'a>, config: &RowsCpuConfig) -> Option<(usize, &'a Expr)> {
    let at = plan.stash.filter(|_| config.stash)?;
    Some((at, plan.stmts[at].body))
}

/// `e` with every occurrence of `part` replaced by [`Expr::Output`].
fn replace_with_output(e: &Expr, part: &Expr) -> Expr {
    if e == part {
        return Expr::Output;
    }
    match e {
        Expr::Neg(a) => Expr::Neg(Box::new(replace_with_output(a, part))),
        Expr::Bin(op, a, b) => Expr::Bin(
            *op,
            Box::new(replace_with_output(a, part)),
            Box::new(replace_with_output(b, part)),
        ),
        Expr::Call(f, args) => Expr::Call(
            *f,
            args.iter().map(|a| replace_with_output(a, part)).collect(),
        ),
        other => other.clone(),
    }
}

/// One statement of a row. `stash` is `Some` for the stage that keeps its values (it
/// stores them) and for the output's statement (it reads them back for the stage's body);
/// `stream` writes the output's row with streaming stores ([`c_stream_row`]); the output's
/// pass runs in blocks of 16 points, each with the statements of `ahead`
/// ([`ahead::Ahead`]), where there are any.
fn c_stmt(
    s: &mut String,
    p: &Printer<'_>,
    st: &RowStmt<'_>,
    config: &RowsCpuConfig,
    stash: Option<Stash<'_>>,
    stream: bool,
    ahead: &[String],
) {
    let base = 2;
    let ind = "    ".repeat(base);
    match st.reducer {
        Some(r) => {
            let _ = writeln!(
                s,
                "{ind}{{ /* {} over {} */",
                r.name(),
                names(p.kernel, &st.over)
            );
            let conds = p.inside(st.body);
            let update = combine(r, "td_acc", &p.unchecked(st.body));
            if let Some(blocks) = reduce::Blocks::of(p, st, config) {
                blocks.print(s, p, st, r, &conds, stash, base + 1);
                finish_reduction(s, p, st, r, &ind);
                return;
            }
            if stash.is_none() {
                if let Some(split) = reduce::Split::of(p, st, config) {
                    split.print(s, p, st, r, &conds, base + 1);
                    finish_reduction(s, p, st, r, &ind);
                    return;
                }
            }
            let _ = writeln!(s, "{ind}    float td_acc = {};", float_lit(r.identity()));
            let clause = format!(" reduction({}:td_acc)", omp_op(r));
            let d = open_loops(s, p, &st.over, config.vector, &clause, base + 1);
            let inner = "    ".repeat(d);
            match stash {
                Some(k) if conds.is_empty() => {
                    // Kept for the output's pass.
                    let _ = writeln!(s, "{inner}const float td_e = {};", p.unchecked(st.body));
                    let _ = writeln!(s, "{inner}{} = td_e;", k.slot(p));
                    let _ = writeln!(s, "{inner}{}", combine(r, "td_acc", "td_e"));
                }
                _ if conds.is_empty() => {
                    let _ = writeln!(s, "{inner}{update}");
                }
                _ => {
                    let _ = writeln!(s, "{inner}if ({}) {update}", conds.join(" && "));
                }
            }
            close_loops(s, d, base + 1);
            finish_reduction(s, p, st, r, &ind);
        }
        None => match st.target {
            Target::Temp(t) => {
                let _ = writeln!(s, "{ind}td_t{t} = {};", p.expr.expr(st.body));
            }
            Target::Output => {
                // `a / b` with `b` the same for the whole row (intermediates and literals):
                // one division per row, a multiplication per element.
                let divided = match st.body {
                    Expr::Bin(BinOp::Div, a, b) if row_invariant(b) => {
                        let _ = writeln!(s, "{ind}const float td_inv = 1.0f / {};", p.expr.expr(b));
                        Some(a.as_ref())
                    }
                    _ => None,
                };
                let value = divided.unwrap_or(st.body);
                let body = match stash {
                    Some(k) => {
                        let reread = ExprPrinter {
                            kernel: p.kernel,
                            shapes: p.shapes,
                            extents: p.extents,
                            index: p.expr.index.clone(),
                            tensor: p.expr.tensor.clone(),
                            output: "td_s".into(),
                            packed: None,
                        };
                        reread.expr(&replace_with_output(value, k.body))
                    }
                    None => p.expr.expr(value),
                };
                let body = match divided {
                    Some(_) => format!("{body} * td_inv"),
                    None => body,
                };
                // The element's value in `td_v` (the output's indices are set).
                let element = |s: &mut String, ind: &str| {
                    if let Some(k) = stash {
                        let _ = writeln!(s, "{ind}const float td_s = {};", k.slot(p));
                    }
                    let _ = writeln!(s, "{ind}float td_v = {body};");
                };
                if stream {
                    c_stream_row(s, p, &ind, st.inner[0], config, &element, ahead);
                    return;
                }
                if let (Some((&v, rest)), false) = (st.inner.split_last(), ahead.is_empty()) {
                    let d = open_loops(s, p, rest, 1, "", base);
                    let ind = "    ".repeat(d);
                    let (n, j) = (p.extents[v], index_name(p.kernel, v));
                    let _ = writeln!(s, "{ind}{{ /* blocks of 16, prefetching the next row */");
                    let _ = writeln!(s, "{ind}    long td_b = 0;");
                    let _ = writeln!(s, "{ind}    for (; td_b + 16 <= {n}; td_b += 16) {{");
                    for pf in ahead {
                        let _ = writeln!(s, "{ind}        {pf}");
                    }
                    if config.vector > 1 {
                        let _ = writeln!(
                            s,
                            "{ind}        #pragma omp simd simdlen({})",
                            config.vector.min(16)
                        );
                    }
                    let _ = writeln!(s, "{ind}        for (long td_l = 0; td_l < 16; ++td_l) {{");
                    let _ = writeln!(s, "{ind}            const long {j} = td_b + td_l;");
                    element(s, &format!("{ind}            "));
                    p.store(s, &format!("{ind}            "));
                    let _ = writeln!(s, "{ind}        }}");
                    let _ = writeln!(s, "{ind}    }}");
                    if n % 16 != 0 {
                        if config.vector > 1 {
                            let _ =
                                writeln!(s, "{ind}    #pragma omp simd simdlen({})", config.vector);
                        }
                        let _ = writeln!(s, "{ind}    for (long {j} = td_b; {j} < {n}; ++{j}) {{");
                        element(s, &format!("{ind}        "));
                        p.store(s, &format!("{ind}        "));
                        let _ = writeln!(s, "{ind}    }}");
                    }
                    let _ = writeln!(s, "{ind}}}");
                    close_loops(s, d, base);
                    return;
                }
                let d = open_loops(s, p, &st.inner, config.vector, "", base);
                let inner = "    ".repeat(d);
                let _ = writeln!(s, "{inner}{{");
                element(s, &format!("{inner}    "));
                p.store(s, &format!("{inner}    "));
                let _ = writeln!(s, "{inner}}}");
                close_loops(s, d, base);
            }
        },
    }
}

/// The end of a reduction statement: its value (the mean divides) into its intermediate,
/// or the output's element stored; closes the statement's block.
fn finish_reduction(s: &mut String, p: &Printer<'_>, st: &RowStmt<'_>, r: Reducer, ind: &str) {
    let value = finish(r, p.points(&st.over));
    match st.target {
        Target::Temp(t) => {
            let _ = writeln!(s, "{ind}    td_t{t} = {value};");
        }
        Target::Output => {
            let _ = writeln!(s, "{ind}    float td_v = {value};");
            p.store(s, &format!("{ind}    "));
        }
    }
    let _ = writeln!(s, "{ind}}}");
}

/// The output's row (its last index `v` alone, contiguous, `f32`) with streaming stores:
/// scalar stores up to the first 64-byte boundary, then blocks of 16 elements computed
/// into a small array (vectorized) and stored with one non-temporal store, then the
/// scalar tail, then a store fence.
fn c_stream_row(
    s: &mut String,
    p: &Printer<'_>,
    ind: &str,
    v: usize,
    config: &RowsCpuConfig,
    element: &dyn Fn(&mut String, &str),
    ahead: &[String],
) {
    let n = p.extents[v];
    let j = index_name(p.kernel, v);
    let epilogue = |s: &mut String, ind: &str| {
        for e in &p.kernel.epilogue {
            let _ = writeln!(s, "{ind}td_v = {};", p.expr.expr(e));
        }
    };
    let _ = writeln!(s, "{ind}{{ /* streaming stores */");
    let _ = writeln!(
        s,
        "{ind}    float *const td_o = out + td_row * {n};\n\
         {ind}    const unsigned long td_addr = (unsigned long)td_o;\n\
         {ind}    const long td_a = td_addr % 4 ? {n} : (long)((64 - td_addr % 64) % 64 / 4);\n\
         {ind}    const long td_peel = td_a < {n} ? td_a : {n};"
    );
    let scalar = |s: &mut String, from: &str, to: &str| {
        let _ = writeln!(s, "{ind}    for (long {j} = {from}; {j} < {to}; ++{j}) {{");
        element(s, &format!("{ind}        "));
        epilogue(s, &format!("{ind}        "));
        let _ = writeln!(s, "{ind}        td_o[{j}] = td_v;");
        let _ = writeln!(s, "{ind}    }}");
    };
    scalar(s, "0", "td_peel");
    let _ = writeln!(s, "{ind}    long td_b = td_peel;");
    let _ = writeln!(s, "{ind}    for (; td_b + 16 <= {n}; td_b += 16) {{");
    for pf in ahead {
        let _ = writeln!(s, "{ind}        {pf}");
    }
    let _ = writeln!(s, "{ind}        float td_w[16];");
    if config.vector > 1 {
        let _ = writeln!(s, "{ind}        #pragma omp simd simdlen(16)");
    }
    let _ = writeln!(s, "{ind}        for (long td_l = 0; td_l < 16; ++td_l) {{");
    let _ = writeln!(s, "{ind}            const long {j} = td_b + td_l;");
    element(s, &format!("{ind}            "));
    epilogue(s, &format!("{ind}            "));
    let _ = writeln!(s, "{ind}            td_w[td_l] = td_v;");
    let _ = writeln!(s, "{ind}        }}");
    let _ = writeln!(s, "{ind}        td_stream16(td_o + td_b, td_w);");
    let _ = writeln!(s, "{ind}    }}");
    scalar(s, "td_b", &n.to_string());
    let _ = writeln!(s, "{ind}    td_sfence();");
    let _ = writeln!(s, "{ind}}}");
}

fn names(kernel: &Kernel, ids: &[usize]) -> String {
    let n: Vec<&str> = ids
        .iter()
        .map(|&i| kernel.indices[i].name.as_str())
        .collect();
    n.join(", ")
}

/// CUDA C: `config.rows_per_block` rows per block, `config.threads_per_row` threads per
/// row striding over each statement's points; reductions combine across a row's threads
/// with `__shfl_xor_sync` and, beyond a warp, through shared memory.
pub fn generate_cuda(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &RowsGpuConfig,
) -> Result<CudaSource, String> {
    config.validate()?;
    let plan = RowPlan::new(kernel, extents)?;
    let p = Printer::new(kernel, extents, shapes);
    let t = config.threads_per_row;
    let rpb = config.rows_per_block;
    let block = config.block();
    let grid = plan.rows.div_ceil(rpb as usize);
    let grid = u32::try_from(grid).map_err(|_| format!("{grid} blocks do not fit a grid"))?;
    let warps_per_row = t / 32;

    let mut s = String::new();
    header(
        &mut s,
        kernel,
        extents,
        "CUDA C",
        &format!(
            "{} rows, {t} threads per row, {rpb} rows per block ({grid} blocks of {block})",
            plan.rows
        ),
    );
    s.push_str("#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n\n");
    s.push_str(&builtin_prelude("__device__ "));
    s.push_str(&used_builtins_prelude(kernel, "__device__ "));
    s.push_str(&dtype_prelude(kernel, "__device__ "));
    let mut params: Vec<String> = kernel
        .inputs()
        .into_iter()
        .map(|q| {
            format!(
                "const {} *__restrict__ t{q}",
                storage_type(kernel.params[q].dtype)
            )
        })
        .collect();
    params.push(format!(
        "{} *__restrict__ out",
        storage_type(kernel.params[kernel.output].dtype)
    ));
    let _ = writeln!(
        s,
        "\nextern \"C\" __global__ void __launch_bounds__({block}) {ENTRY}({}) {{",
        params.join(", ")
    );
    let ind = "    ";
    if warps_per_row > 1 {
        let _ = writeln!(s, "{ind}__shared__ float td_red[{}];", warps_per_row * rpb);
    }
    let _ = writeln!(s, "{ind}const long td_lane = threadIdx.x % {t};");
    let _ = writeln!(
        s,
        "{ind}const long td_first = (long)blockIdx.x * {rpb} + threadIdx.x / {t};"
    );
    let _ = writeln!(
        s,
        "{ind}/* A thread past the last row works on row 0 and stores nothing: every thread \
         takes part in the shuffles and barriers. */"
    );
    let _ = writeln!(s, "{ind}const bool td_valid = td_first < {};", plan.rows);
    let _ = writeln!(s, "{ind}const long td_row = td_valid ? td_first : 0;");
    p.decompose(&mut s, ind, &plan.outer, "td_row");
    temps_decl(&mut s, ind, &plan);
    let regs = registers::Registers::of(&p, &plan, t as usize);
    if let Some(regs) = &regs {
        regs.prologue(&mut s, &p, ind);
    }
    for (at, st) in plan.stmts.iter().enumerate() {
        cuda_stmt(&mut s, &p, st, t, regs.as_ref().map(|r| (r, at)));
    }
    s.push_str("}\n");
    Ok(CudaSource {
        source: s,
        entry: ENTRY.into(),
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
        tensor_maps: Vec::new(),
    })
}

/// Combines `td_acc` across the `t` threads of a row; every thread gets the result.
fn row_reduce(s: &mut String, ind: &str, r: Reducer, t: u32) {
    let mut o = t.min(32) / 2;
    while o > 0 {
        // The partner's value first: every thread shuffles exactly once per step.
        let _ = writeln!(
            s,
            "{ind}{{ const float td_o = __shfl_xor_sync(0xffffffffu, td_acc, {o}); td_acc = {}; }}",
            merge(r, "td_acc", "td_o")
        );
        o /= 2;
    }
    if t > 32 {
        let w = t / 32;
        let _ = writeln!(
            s,
            "{ind}if (threadIdx.x % 32 == 0) td_red[threadIdx.x / 32] = td_acc;"
        );
        let _ = writeln!(s, "{ind}__syncthreads();");
        let _ = writeln!(s, "{ind}td_acc = td_red[threadIdx.x / {t} * {w}];");
        let _ = writeln!(s, "{ind}for (int td_w = 1; td_w < {w}; ++td_w) {{");
        let _ = writeln!(
            s,
            "{ind}    const float td_o = td_red[threadIdx.x / {t} * {w} + td_w];"
        );
        let _ = writeln!(s, "{ind}    td_acc = {};", merge(r, "td_acc", "td_o"));
        let _ = writeln!(s, "{ind}}}");
        let _ = writeln!(s, "{ind}__syncthreads();");
    }
}

/// One statement of a GPU row; with `regs` (and the statement's place in the plan) its
/// loop is the unrolled walk over the thread's points held in registers.
fn cuda_stmt(
    s: &mut String,
    p: &Printer<'_>,
    st: &RowStmt<'_>,
    t: u32,
    regs: Option<(&registers::Registers<'_>, usize)>,
) {
    let ind = "    ";
    let open = |s: &mut String, ids: &[usize], at: &str| match regs {
        Some((r, _)) => r.open(s, p, at),
        None => {
            let n = p.points(ids);
            let _ = writeln!(
                s,
                "{at}for (long td_p = td_lane; td_p < {n}; td_p += {t}) {{"
            );
            p.decompose(s, &format!("{at}    "), ids, "td_p");
        }
    };
    let close = |s: &mut String, at: &str| match regs {
        Some((r, _)) => r.close(s, at),
        None => {
            let _ = writeln!(s, "{at}}}");
        }
    };
    // The body's indentation under a loop header printed at `at`.
    let body_at = |at: &str| format!("{at}{}", if regs.is_some() { "        " } else { "    " });
    let read = |a: &crate::ir::Access| regs.and_then(|(r, _)| r.read(a));
    match st.reducer {
        Some(r) => {
            let _ = writeln!(
                s,
                "{ind}{{ /* {} over {} */",
                r.name(),
                names(p.kernel, &st.over)
            );
            let _ = writeln!(s, "{ind}    float td_acc = {};", float_lit(r.identity()));
            let n = p.points(&st.over);
            open(s, &st.over, "        ");
            let body_at = body_at("        ");
            let conds = p.inside(st.body);
            let value = p
                .expr
                .expr_with(st.body, &|a| read(a).or_else(|| Some(p.load(a))));
            let update = match regs {
                Some((regs, at)) if regs.stashes(at) => {
                    let _ = writeln!(s, "{body_at}td_s[td_k] = {value};");
                    combine(r, "td_acc", "td_s[td_k]")
                }
                _ => combine(r, "td_acc", &value),
            };
            if conds.is_empty() {
                let _ = writeln!(s, "{body_at}{update}");
            } else {
                let _ = writeln!(s, "{body_at}if ({}) {update}", conds.join(" && "));
            }
            close(s, "        ");
            row_reduce(s, "        ", r, t);
            let value = finish(r, n);
            match st.target {
                Target::Temp(tt) => {
                    let _ = writeln!(s, "{ind}    td_t{tt} = {value};");
                }
                Target::Output => {
                    let _ = writeln!(s, "{ind}    if (td_valid && td_lane == 0) {{");
                    let _ = writeln!(s, "{ind}        float td_v = {value};");
                    p.store(s, "            ");
                    let _ = writeln!(s, "{ind}    }}");
                }
            }
            let _ = writeln!(s, "{ind}}}");
        }
        None => match st.target {
            Target::Temp(tt) => {
                let _ = writeln!(s, "{ind}td_t{tt} = {};", p.expr.expr(st.body));
            }
            Target::Output => {
                let _ = writeln!(s, "{ind}if (td_valid) {{");
                open(s, &st.inner, "        ");
                let body_at = body_at("        ");
                let value = match regs {
                    Some((regs, _)) => regs.output_body(p, st.body),
                    None => p.expr.expr(st.body),
                };
                let _ = writeln!(s, "{body_at}float td_v = {value};");
                p.store(s, &body_at);
                close(s, "        ");
                let _ = writeln!(s, "{ind}}}");
            }
        },
    }
}

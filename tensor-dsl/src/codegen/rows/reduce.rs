//! Reductions of a row in several vector accumulators.
//!
//! A vectorized reduction (`omp simd` with a reduction clause) keeps one vector
//! accumulator, so each vector waits on the previous one's `vaddps`/`vmaxps`, and GCC
//! finishes a sum by adding its lanes one after the other (it may not reorder a float sum
//! it was not told it may: 16 dependent additions per row, a `max` gets a tree). Two forms
//! avoid both:
//!
//! - [`Split`] (`max`, `min` without a call in the body): the loop cut into contiguous
//!   chunks reduced side by side, each with its own accumulator, the chunks combined at the
//!   end; GCC's own tree finishes each.
//! - [`Blocks`] (`sum`, `mean`, `prod`): the loop in blocks of 16 to 64 points whose values
//!   a vectorized inner loop writes to a small array, added to 1 to 4 GNU C vectors of 16
//!   floats (`td_vec`), whose lanes are added as a tree of shuffles at the end
//!   ([`VECTOR_PRELUDE`]); the points past the last block run in the plain form. A body
//!   with a call (softmax's `exp`) takes blocks of 16: its arithmetic, not the chain, bounds
//!   it.
//!
//! Single core, the bench's softmax over 2048×128 (short rows: the finish of each row's
//! sum is a large share) ran in about 83% of the time with the blocks' sum, hand-edited
//! side by side; over 512×1024, 98%.

use super::{close_loops, combine, merge, omp_op, open_loops, Printer, Stash};
use crate::codegen::{float_lit, index_name};
use crate::ir::Reducer;
use crate::template::rows::{has_call, RowStmt, RowsCpuConfig};
use std::fmt::Write as _;

/// A reduction's innermost loop cut into `chunks` contiguous chunks of `len` points (a
/// multiple of the vector's `lanes`), reduced side by side into as many accumulators, then
/// the rest of the loop into the first: `chunks` independent vector accumulators (GCC
/// keeps one register for the lanes of a `simdlen(32)` loop, so its reduction waits on one
/// dependency chain per vector; with the input in L1, four chunks took 14% off a whole
/// softmax over 512×1024, one core). Only for bodies without a call: a body with one
/// (softmax's `exp`) is bound by its arithmetic, not by the chain.
pub(super) struct Split {
    chunks: usize,
    len: usize,
    lanes: usize,
}

impl Split {
    /// The split of a `max` or `min` `st` under `config`: `vector / lanes` chunks (at most
    /// 4) where the innermost loop has two vectors for each (a chunk of one vector would
    /// only add a finish).
    pub(super) fn of(p: &Printer<'_>, st: &RowStmt<'_>, config: &RowsCpuConfig) -> Option<Split> {
        let lanes = if config.wide { 16 } else { 8 };
        let chunks = (config.vector as usize / lanes).min(4);
        let extremum = matches!(st.reducer, Some(Reducer::Max | Reducer::Min));
        if !extremum || config.vector <= 1 || chunks < 2 || has_call(st.body) {
            return None;
        }
        let v = *st.over.last()?;
        let len = p.extents[v] / (chunks * lanes) * lanes;
        (len >= 2 * lanes).then_some(Split { chunks, len, lanes })
    }

    /// The accumulators `td_acc`, `td_acc1`, ..., the loops, and the accumulators combined
    /// into `td_acc`.
    pub(super) fn print(
        &self,
        s: &mut String,
        p: &Printer<'_>,
        st: &RowStmt<'_>,
        r: Reducer,
        conds: &[String],
        depth: usize,
    ) {
        let Some((&v, outer)) = st.over.split_last() else {
            return;
        };
        let accs: Vec<String> = (0..self.chunks)
            .map(|c| match c {
                0 => "td_acc".to_string(),
                c => format!("td_acc{c}"),
            })
            .collect();
        let id = float_lit(r.identity());
        let decl: Vec<String> = accs.iter().map(|a| format!("{a} = {id}")).collect();
        let _ = writeln!(s, "{}float {};", "    ".repeat(depth), decl.join(", "));
        let d = open_loops(s, p, outer, 1, "", depth);
        let ind = "    ".repeat(d);
        let j = index_name(p.kernel, v);
        let body = p.unchecked(st.body);
        let update = |acc: &str| {
            let u = combine(r, acc, &body);
            if conds.is_empty() {
                u
            } else {
                format!("if ({}) {u}", conds.join(" && "))
            }
        };
        let _ = writeln!(
            s,
            "{ind}#pragma omp simd simdlen({}) reduction({}:{})",
            self.lanes,
            omp_op(r),
            accs.join(", ")
        );
        let _ = writeln!(
            s,
            "{ind}for (long td_k = 0; td_k < {}; ++td_k) {{",
            self.len
        );
        for (c, acc) in accs.iter().enumerate() {
            let at = match c {
                0 => "td_k".to_string(),
                c => format!("td_k + {}", c * self.len),
            };
            let _ = writeln!(s, "{ind}    {{ const long {j} = {at}; {} }}", update(acc));
        }
        let _ = writeln!(s, "{ind}}}");
        let (done, n) = (self.chunks * self.len, p.extents[v]);
        if done < n {
            let _ = writeln!(
                s,
                "{ind}#pragma omp simd simdlen({}) reduction({}:td_acc)",
                self.lanes,
                omp_op(r)
            );
            let _ = writeln!(s, "{ind}for (long {j} = {done}; {j} < {n}; ++{j}) {{");
            let _ = writeln!(s, "{ind}    {}", update("td_acc"));
            let _ = writeln!(s, "{ind}}}");
        }
        close_loops(s, d, depth);
        // A balanced tree: (0 1) (2 3).
        let mut level = accs;
        while level.len() > 1 {
            level = level
                .chunks(2)
                .map(|pair| match pair {
                    [a, b] => merge(r, a, b),
                    [a] => a.clone(),
                    _ => String::new(),
                })
                .collect();
        }
        if let Some(all) = level.first() {
            let _ = writeln!(s, "{}td_acc = {all};", "    ".repeat(depth));
        }
    }
}

/// GNU C vectors of 16 floats (`td_vec`) for [`Blocks`]: a load from a float array, a
/// splat, `+`, `*` and their tree reductions over the lanes (shuffles); arrays of 16 floats
/// in loops for a compiler without vector extensions.
pub(super) const VECTOR_PRELUDE: &str = "\
#if defined(__GNUC__) || defined(__clang__)
#define TD_ALIGN64 __attribute__((aligned(64)))
typedef float td_vec __attribute__((vector_size(64)));
#if defined(__clang__)
#define TD_SHUF(v, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
typedef int td_ivec __attribute__((vector_size(64)));
#define TD_SHUF(v, ...) __builtin_shuffle(v, (td_ivec){__VA_ARGS__})
#endif
static inline td_vec td_vload(const float *p) { td_vec v; __builtin_memcpy(&v, p, 64); return v; }
static inline td_vec td_vsplat(float x) { td_vec v = {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; return v; }
static inline td_vec td_vadd(td_vec a, td_vec b) { return a + b; }
static inline td_vec td_vmul(td_vec a, td_vec b) { return a * b; }
#define TD_TREE(op, v) \\
    v = v op TD_SHUF(v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7); \\
    v = v op TD_SHUF(v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11); \\
    v = v op TD_SHUF(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13); \\
    v = v op TD_SHUF(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14)
static inline float td_hsum(td_vec v) { TD_TREE(+, v); return v[0]; }
static inline float td_hprod(td_vec v) { TD_TREE(*, v); return v[0]; }
#else
#define TD_ALIGN64
typedef struct { float l[16]; } td_vec;
static inline td_vec td_vload(const float *p) { td_vec v; for (int i = 0; i < 16; ++i) v.l[i] = p[i]; return v; }
static inline td_vec td_vsplat(float x) { td_vec v; for (int i = 0; i < 16; ++i) v.l[i] = x; return v; }
static inline td_vec td_vadd(td_vec a, td_vec b) { for (int i = 0; i < 16; ++i) a.l[i] += b.l[i]; return a; }
static inline td_vec td_vmul(td_vec a, td_vec b) { for (int i = 0; i < 16; ++i) a.l[i] *= b.l[i]; return a; }
static inline float td_hsum(td_vec v) { for (int w = 8; w > 0; w /= 2) for (int i = 0; i < w; ++i) v.l[i] += v.l[i + w]; return v.l[0]; }
static inline float td_hprod(td_vec v) { for (int w = 8; w > 0; w /= 2) for (int i = 0; i < w; ++i) v.l[i] *= v.l[i + w]; return v.l[0]; }
#endif
";

/// A `sum`, `mean` or `prod` in blocks of `width` points added to `width / 16` vector
/// accumulators (see the module docs).
pub(super) struct Blocks {
    width: usize,
}

impl Blocks {
    /// The blocks of `st` under `config`: vectorized rows only, blocks of `vector` points
    /// (16 to 64; 16 for a body with a call) where the loop has at least one.
    pub(super) fn of(p: &Printer<'_>, st: &RowStmt<'_>, config: &RowsCpuConfig) -> Option<Blocks> {
        let additive = matches!(
            st.reducer,
            Some(Reducer::Sum | Reducer::Mean | Reducer::Prod)
        );
        let width = if has_call(st.body) {
            16
        } else {
            (config.vector as usize).clamp(16, 64)
        };
        let v = *st.over.last()?;
        (additive && config.vector > 1 && p.extents[v] >= width).then_some(Blocks { width })
    }

    /// The accumulators, the loops and the reduced value in `td_acc`. `update` is the
    /// element's plain-form update (the `stash` store and the checks `conds` included);
    /// `element` writes the point's value into `td_e` the same way.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn print(
        &self,
        s: &mut String,
        p: &Printer<'_>,
        st: &RowStmt<'_>,
        r: Reducer,
        conds: &[String],
        stash: Option<Stash<'_>>,
        depth: usize,
    ) {
        let Some((&v, outer)) = st.over.split_last() else {
            return;
        };
        let (n, w) = (p.extents[v], self.width);
        let full = n / w * w;
        let vectors = w / 16;
        let id = float_lit(r.identity());
        let (vop, hop) = match r {
            Reducer::Prod => ("td_vmul", "td_hprod"),
            _ => ("td_vadd", "td_hsum"),
        };
        let ind0 = "    ".repeat(depth);
        let accs: Vec<String> = (0..vectors).map(|a| format!("td_a{a}")).collect();
        let decl: Vec<String> = accs
            .iter()
            .map(|a| format!("{a} = td_vsplat({id})"))
            .collect();
        let _ = writeln!(s, "{ind0}td_vec {};", decl.join(", "));
        let _ = writeln!(s, "{ind0}float td_acc = {id};");
        let d = open_loops(s, p, outer, 1, "", depth);
        let ind = "    ".repeat(d);
        let j = index_name(p.kernel, v);
        let body = p.unchecked(st.body);
        // The point's value into `td_e` (the identity where a read falls outside).
        let element = |s: &mut String, ind: &str| {
            if conds.is_empty() {
                let _ = writeln!(s, "{ind}const float td_e = {body};");
            } else {
                let _ = writeln!(s, "{ind}float td_e = {id};");
                let _ = writeln!(s, "{ind}if ({}) td_e = {body};", conds.join(" && "));
            }
            if let Some(k) = stash {
                let _ = writeln!(s, "{ind}{} = td_e;", k.slot(p));
            }
        };
        let _ = writeln!(s, "{ind}for (long td_b = 0; td_b < {full}; td_b += {w}) {{");
        let _ = writeln!(s, "{ind}    float td_w[{w}] TD_ALIGN64;");
        let _ = writeln!(s, "{ind}    #pragma omp simd simdlen(16)");
        let _ = writeln!(s, "{ind}    for (long td_l = 0; td_l < {w}; ++td_l) {{");
        let _ = writeln!(s, "{ind}        const long {j} = td_b + td_l;");
        element(s, &format!("{ind}        "));
        let _ = writeln!(s, "{ind}        td_w[td_l] = td_e;");
        let _ = writeln!(s, "{ind}    }}");
        for (a, acc) in accs.iter().enumerate() {
            let at = match a {
                0 => "td_w".to_string(),
                a => format!("td_w + {}", 16 * a),
            };
            let _ = writeln!(s, "{ind}    {acc} = {vop}({acc}, td_vload({at}));");
        }
        let _ = writeln!(s, "{ind}}}");
        if full < n {
            let _ = writeln!(
                s,
                "{ind}#pragma omp simd simdlen(16) reduction({}:td_acc)",
                omp_op(r)
            );
            let _ = writeln!(s, "{ind}for (long {j} = {full}; {j} < {n}; ++{j}) {{");
            element(s, &format!("{ind}    "));
            let _ = writeln!(s, "{ind}    {}", combine(r, "td_acc", "td_e"));
            let _ = writeln!(s, "{ind}}}");
        }
        close_loops(s, d, depth);
        let mut all = accs[0].clone();
        for acc in &accs[1..] {
            all = format!("{vop}({all}, {acc})");
        }
        let _ = writeln!(
            s,
            "{ind0}td_acc = {};",
            merge(r, "td_acc", &format!("{hop}({all})"))
        );
    }
}

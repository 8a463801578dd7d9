//! C for a window reduction in two passes ([`Window`], [`RowsCpuConfig::separable`]): max,
//! min, sum, mean or product pooling.
//!
//! For each row of outputs (every outer index but the line index `q`):
//!
//! 1. the columns of the tensor's last dimension that the row's windows read outside the
//!    tensor get the reducer's identity in a column buffer on the stack (64-byte aligned,
//!    column 0 on a 64-byte boundary);
//! 2. the **vertical** pass reduces the body over the vertical window (`r` of
//!    `2 * p + r - 1`) for every column the row's windows read inside the tensor, vectorized
//!    along the columns: unit-stride loads of a few input rows, the window's loops unrolled
//!    where they have at most 8 points. A row whose vertical window lies inside the tensor
//!    (all but the padding border) runs it without checks; a border row checks each
//!    vertical point (a point outside contributes the identity, as everywhere);
//! 3. the **horizontal** pass reduces the column buffer over the horizontal window (`s` of
//!    `2 * q + s - 1`) for every output of the row, vectorized along `q`, without checks
//!    (the buffer covers every column the windows read), then finishes (the mean divides by
//!    the whole window) and runs the epilogue.
//!
//! Against one reduction per output (the `across` form, [`super::c_across`]), a 3×3 window
//! reads 3 + 3 values per output instead of 9, the input only with unit-stride loads, and
//! the padding border costs no checks in the hot loops. On one core this form ran the
//! bench's 3×3/2 max pooling of 1×64×112×112 in about two thirds of the time of the
//! `across` form (side by side; the bench's results files have the committed comparison
//! with ONNX Runtime).

use super::{close_loops, combine, finish, names, Printer};
use crate::codegen::{
    bound_checks, float_lit, index_name, load_as_f32, offset_expr, strides, Coord,
};
use crate::ir::Affine;
use crate::template::rows::{RowPlan, RowsCpuConfig, Window};
use std::fmt::Write as _;

/// `64`-byte alignment for the column buffer where the compiler has the attribute.
pub(super) const ALIGN_PRELUDE: &str = "\
#if defined(__GNUC__) || defined(__clang__)
#define TD_ALIGN64 __attribute__((aligned(64)))
#else
#define TD_ALIGN64
#endif
";

/// Opens `for` loops over `ids`, each with `#pragma GCC unroll` where it has at most 8
/// points; returns the depth inside.
fn window_loops(s: &mut String, p: &Printer<'_>, ids: &[usize], depth: usize) -> usize {
    let mut d = depth;
    for &v in ids {
        let ind = "    ".repeat(d);
        let n = p.extents[v];
        if n <= 8 {
            let _ = writeln!(s, "{ind}#pragma GCC unroll {n}");
        }
        let name = index_name(p.kernel, v);
        let _ = writeln!(s, "{ind}for (long {name} = 0; {name} < {n}; ++{name}) {{");
        d += 1;
    }
    d
}

/// The row loop of a separable window (see the module docs).
pub(super) fn c_separable(
    s: &mut String,
    p: &Printer<'_>,
    plan: &RowPlan<'_>,
    w: &Window,
    config: &RowsCpuConfig,
) {
    let Some((&line, prefix)) = plan.outer.split_last() else {
        return;
    };
    let st = &plan.stmts[0];
    let Some(r) = st.reducer else {
        return;
    };
    let groups = p.points(prefix);
    let outputs = p.extents[line];
    let q = index_name(p.kernel, line);
    let tensor = w.access.tensor;
    let shape = p.shapes[tensor];
    let width = shape[w.dim] as i64;
    // Column x lives at td_col[x + off]; column 0 starts a 64-byte line.
    let off = -w.lo.div_euclid(16) * 16;
    let len = w.hi + off + 1;
    let (x0, x1) = (w.lo.max(0), (w.hi + 1).min(width));
    let id = float_lit(r.identity());
    let name = |v: usize| index_name(p.kernel, v);

    if config.parallel && groups > 1 {
        s.push_str("    #pragma omp parallel for schedule(static)\n");
    }
    let _ = writeln!(
        s,
        "    for (long td_row = 0; td_row < {groups}; ++td_row) {{ /* {} over {} then {}: {outputs} outputs along {} */",
        r.name(),
        names(p.kernel, &w.vertical),
        names(p.kernel, &w.horizontal),
        p.kernel.indices[line].name
    );
    p.decompose(s, "        ", prefix, "td_row");
    let _ = writeln!(
        s,
        "        float td_col[{len}] TD_ALIGN64; /* column x of the vertical {} at td_col[x + {off}] */",
        r.name()
    );
    if w.lo < 0 {
        let _ = writeln!(
            s,
            "        for (long td_c = {}; td_c < {}; ++td_c) td_col[td_c + {off}] = {id};",
            w.lo,
            (w.hi + 1).min(0)
        );
    }
    if w.hi >= width {
        let _ = writeln!(
            s,
            "        for (long td_c = {}; td_c <= {}; ++td_c) td_col[td_c + {off}] = {id};",
            w.lo.max(width),
            w.hi
        );
    }

    // The vertical pass: the read with column td_c.
    let coords: Vec<Coord> = w
        .access
        .dims
        .iter()
        .enumerate()
        .map(|(d, map)| {
            if d == w.dim {
                return Coord {
                    expr: "td_c".into(),
                    simple: true,
                    lo: x0,
                    hi: x1 - 1,
                };
            }
            let (lo, hi) = map.range(p.extents);
            let mut expr = String::new();
            map.write(&mut expr, &name);
            Coord {
                expr,
                simple: map.as_var().is_some() || map.terms.is_empty(),
                lo,
                hi,
            }
        })
        .collect();
    let read = load_as_f32(
        p.kernel.params[tensor].dtype,
        &format!("t{tensor}[{}]", offset_expr(shape, &coords)),
    );
    let value = p
        .expr
        .expr_with(st.body, &|a| (a == &w.access).then(|| read.clone()));
    let update = combine(r, "td_acc", &value);
    let checks = bound_checks(shape, &coords);
    // Every vertical point inside the tensor: each dimension's range over the vertical
    // window, at this row's outer indices.
    let mut inside: Vec<String> = Vec::new();
    for (d, map) in w.access.dims.iter().enumerate() {
        if d == w.dim {
            continue;
        }
        let n = shape[d] as i64;
        let (lo, hi) = map.range(p.extents);
        if lo >= 0 && hi < n {
            continue;
        }
        let (mut vmin, mut vmax) = (0i64, 0i64);
        let mut rest = Affine {
            terms: Vec::new(),
            offset: map.offset,
        };
        for &(v, c) in &map.terms {
            if w.vertical.contains(&v) {
                let top = c * (p.extents[v] as i64 - 1);
                if c > 0 {
                    vmax += top;
                } else {
                    vmin += top;
                }
            } else {
                rest.terms.push((v, c));
            }
        }
        let at = |shift: i64| {
            let mut e = String::new();
            Affine {
                terms: rest.terms.clone(),
                offset: rest.offset + shift,
            }
            .write(&mut e, &name);
            e
        };
        if lo < 0 {
            inside.push(format!("{} >= 0", at(vmin)));
        }
        if hi >= n {
            inside.push(format!("{} < {n}", at(vmax)));
        }
    }
    let vertical_lanes = match (config.vector, config.wide) {
        (1, _) => None,
        (_, true) => Some(16),
        (_, false) => Some(8),
    };
    let vertical = |s: &mut String, checked: bool, depth: usize| {
        lane_loops(s, depth, "td_c", x0, x1, vertical_lanes, &|s, depth| {
            let ind = "    ".repeat(depth);
            let _ = writeln!(s, "{ind}float td_acc = {id};");
            let d = window_loops(s, p, &w.vertical, depth);
            let inner = "    ".repeat(d);
            if checked && !checks.is_empty() {
                let _ = writeln!(s, "{inner}if ({}) {update}", checks.join(" && "));
            } else {
                let _ = writeln!(s, "{inner}{update}");
            }
            close_loops(s, d, depth);
            let _ = writeln!(s, "{ind}td_col[td_c + {off}] = td_acc;");
        });
    };
    if x0 < x1 {
        let _ = writeln!(
            s,
            "        /* vertical {} over {} of the columns inside the tensor */",
            r.name(),
            names(p.kernel, &w.vertical)
        );
        if inside.is_empty() {
            vertical(s, false, 2);
        } else {
            let _ = writeln!(s, "        if ({}) {{", inside.join(" && "));
            vertical(s, false, 3);
            let _ = writeln!(s, "        }} else {{ /* the padding border */");
            vertical(s, true, 3);
            let _ = writeln!(s, "        }}");
        }
    }

    prefetch_next_row(s, p, w, prefix, groups, x0, x1);

    // The horizontal pass over the column buffer.
    let map = &w.access.dims[w.dim];
    let mut column = String::new();
    map.write(&mut column, &name);
    let _ = writeln!(
        s,
        "        /* horizontal {} over {} */",
        r.name(),
        names(p.kernel, &w.horizontal)
    );
    let lanes = (config.vector > 1).then_some(config.vector.min(16) as usize);
    lane_loops(s, 2, &q, 0, outputs as i64, lanes, &|s, depth| {
        let ind = "    ".repeat(depth);
        let _ = writeln!(s, "{ind}float td_acc = {id};");
        let d = window_loops(s, p, &w.horizontal, depth);
        let inner = "    ".repeat(d);
        let _ = writeln!(
            s,
            "{inner}{}",
            combine(r, "td_acc", &format!("td_col[{column} + {off}]"))
        );
        close_loops(s, d, depth);
        let _ = writeln!(s, "{ind}float td_v = {};", finish(r, p.points(&st.over)));
        p.store(s, &ind);
    });
    s.push_str("    }\n");
}

/// Rows of fewer columns than this are not prefetched: short rows are few cache lines that
/// the hardware prefetcher follows, and the prefetch loop was a fifth of the time of a row
/// of 14 columns (2×2/2 pooling of 256×14×14, one core).
const PREFETCH_COLUMNS_MIN: i64 = 48;

/// The next row's vertical reads, one prefetch per 16 columns (the row after this one in the
/// iteration order: its last outer index one further), for rows of at least
/// [`PREFETCH_COLUMNS_MIN`] columns. The vertical pass of a row waits on its input rows
/// (from L3 or memory); asked for a row ahead, they arrive while this row's horizontal pass
/// runs. Offsets are clamped to the tensor (a window row of the padding border, or past the
/// last row, is not there to fetch).
fn prefetch_next_row(
    s: &mut String,
    p: &Printer<'_>,
    w: &Window,
    prefix: &[usize],
    groups: usize,
    x0: i64,
    x1: i64,
) {
    let Some(&last) = prefix.last() else {
        return;
    };
    let tensor = w.access.tensor;
    let shape = p.shapes[tensor];
    let delta: i64 = w
        .access
        .dims
        .iter()
        .zip(strides(shape))
        .map(|(d, stride)| {
            let c: i64 = d
                .terms
                .iter()
                .filter(|(x, _)| *x == last)
                .map(|(_, c)| c)
                .sum();
            c * stride as i64
        })
        .sum();
    if delta == 0 || groups < 2 || x1 - x0 < PREFETCH_COLUMNS_MIN {
        return;
    }
    let size: usize = shape.iter().product();
    let coords: Vec<Coord> = w
        .access
        .dims
        .iter()
        .enumerate()
        .map(|(d, map)| {
            let mut expr = String::new();
            if d == w.dim {
                expr.push_str("td_c");
            } else {
                map.write(&mut expr, &|v| index_name(p.kernel, v));
            }
            Coord {
                simple: d == w.dim || map.as_var().is_some() || map.terms.is_empty(),
                expr,
                lo: 0,
                hi: 0,
            }
        })
        .collect();
    let _ = writeln!(
        s,
        "        {{ /* prefetch the next row's reads */\n            const long td_next = td_row + 1 < {groups} ? {delta} : 0;"
    );
    let d = window_loops(s, p, &w.vertical, 3);
    let ind = "    ".repeat(d);
    let _ = writeln!(
        s,
        "{ind}for (long td_c = {x0}; td_c < {x1}; td_c += 16) {{\n\
         {ind}    const long td_o = {} + td_next;\n\
         {ind}    TD_PREFETCH(&t{tensor}[td_o < 0 ? 0 : td_o > {} ? {} : td_o]);\n\
         {ind}}}",
        offset_expr(shape, &coords),
        size - 1,
        size - 1
    );
    close_loops(s, d, 3);
    let _ = writeln!(s, "        }}");
}

/// `for (long var = from; var < to; ++var) { body }` in vectors of `lanes`: the whole
/// vectors, then, where the loop has at least one vector and a part of one is left that
/// is not a multiple of 4 points, the last `lanes` points again as one vector (the body
/// computes each point from the inputs alone and stores it, so a point done twice is the
/// same store twice): no scalar remainder. GCC does a remainder of 4, 8 or 12 points in
/// narrower vectors, and that ran a little faster than the overlapping vector (one core,
/// 3×3/2 pooling of 56×56); remainders of 7 and 11 (of 55×55) ran 20% slower without it.
/// Without `lanes`, one plain loop.
fn lane_loops(
    s: &mut String,
    depth: usize,
    var: &str,
    from: i64,
    to: i64,
    lanes: Option<usize>,
    body: &dyn Fn(&mut String, usize),
) {
    let ind = "    ".repeat(depth);
    let Some(l) = lanes.map(|l| l as i64) else {
        let _ = writeln!(
            s,
            "{ind}for (long {var} = {from}; {var} < {to}; ++{var}) {{"
        );
        body(s, depth + 1);
        let _ = writeln!(s, "{ind}}}");
        return;
    };
    let whole = from + (to - from) / l * l;
    let open = |s: &mut String, a: i64, b: i64, note: &str| {
        let _ = writeln!(s, "{ind}#pragma omp simd simdlen({l}){note}");
        let _ = writeln!(s, "{ind}for (long {var} = {a}; {var} < {b}; ++{var}) {{");
        body(s, depth + 1);
        let _ = writeln!(s, "{ind}}}");
    };
    if whole == from || (to - whole) % 4 == 0 {
        open(s, from, to, "");
    } else {
        open(s, from, whole, "");
        open(s, to - l, to, " /* the last vector again, overlapping */");
    }
}

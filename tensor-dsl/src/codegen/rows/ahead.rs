//! Prefetching the next row's reads during the output's pass of a row of several passes.
//!
//! A row of softmax or layer norm reads its input row two or three times: the first pass
//! (the row's `max` or `mean`) waits on memory (or the L3 cache) for every line, the
//! later ones find it in L1. The output's pass is the lightest, so it asks for the next
//! row's lines, one prefetch per 16 points (a 64-byte line of `f32`), and the next row's
//! first pass finds them in L1 too: the memory latency hides behind the current row's
//! arithmetic instead of adding to it. The next row is the one after this one in the
//! iteration order (`td_row + 1`: the same thread's next row under OpenMP's static
//! schedule, but at the end of its share); the last row prefetches its own lines.
//!
//! Which reads: those of the row's statements whose last dimension is the output pass's
//! innermost index alone (contiguous along it), whose other dimensions depend on no index
//! of a row's loops, and whose element moves with the row (the last outer index has a
//! coefficient in its offset): softmax's and layer norm's `x[[i, j]]`, not `gamma[[j]]`.
//! Single core, the bench's softmax over 512×1024 (prefetching in the third pass, hand
//! edited, side by side) ran in about 92% of the time without.

use super::Printer;
use crate::codegen::{index_name, offset_expr, strides, Coord};
use crate::ir::Access;
use crate::template::rows::{RowPlan, Target};
use std::fmt::Write as _;

/// Output rows of fewer points than this prefetch nothing: a few lines the hardware
/// prefetcher follows, and the prefetches cost layer norm over 2048×64 about 4% (one core;
/// neutral at 128 and 768 points).
pub(super) const AHEAD_POINTS_MIN: usize = 128;

/// `TD_PREFETCH(p)`: a read prefetch into all cache levels where the compiler has one.
pub(super) const PREFETCH_PRELUDE: &str = "\
#if defined(__GNUC__) || defined(__clang__)
#define TD_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define TD_PREFETCH(p) ((void)(p))
#endif
";

/// The next row's reads of a plan: declarations for the top of a row and the prefetch
/// statements of a block of 16 points starting at `td_b` of the output's innermost index.
#[derive(Default)]
pub(super) struct Ahead {
    /// `const long td_next0 = td_row + 1 < 512 ? 1024 : 0;` per read.
    pub decls: Vec<String>,
    /// `TD_PREFETCH(&t0[1024 * i_i + td_b + td_next0]);` per read.
    pub prefetch: Vec<String>,
}

impl Ahead {
    /// What a row of `plan` prefetches: nothing for a plan of one pass, one without an
    /// elementwise output pass, or one whose output rows are shorter than
    /// [`AHEAD_POINTS_MIN`].
    pub fn of(p: &Printer<'_>, plan: &RowPlan<'_>) -> Ahead {
        let mut ahead = Ahead::default();
        let (Some(out), Some(&last)) = (plan.stmts.last(), plan.outer.last()) else {
            return ahead;
        };
        let Some(&v) = out.inner.last() else {
            return ahead;
        };
        if out.target != Target::Output
            || out.reducer.is_some()
            || plan.stmts.len() < 2
            || p.extents[v] < AHEAD_POINTS_MIN
        {
            return ahead;
        }
        let in_row: Vec<usize> = plan
            .stmts
            .iter()
            .flat_map(|st| st.inner.iter().chain(&st.over).copied())
            .collect();
        let mut seen: Vec<&Access> = Vec::new();
        for st in &plan.stmts {
            st.body.visit_accesses(&mut |a| {
                if !seen.contains(&a) {
                    seen.push(a);
                }
            });
        }
        for a in seen {
            let Some((lastdim, rest)) = a.dims.split_last() else {
                continue;
            };
            if lastdim.as_var() != Some(v)
                || rest
                    .iter()
                    .any(|d| d.terms.iter().any(|(x, _)| in_row.contains(x)))
            {
                continue;
            }
            let shape = p.shapes[a.tensor];
            let delta: i64 = a
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
            if delta == 0 {
                continue;
            }
            let coords: Vec<Coord> = a
                .dims
                .iter()
                .map(|map| {
                    let mut expr = String::new();
                    map.write(&mut expr, &|x| {
                        if x == v {
                            "td_b".into()
                        } else {
                            index_name(p.kernel, x)
                        }
                    });
                    Coord {
                        expr,
                        simple: map.as_var().is_some() || map.terms.is_empty(),
                        lo: 0,
                        hi: 0,
                    }
                })
                .collect();
            let k = ahead.decls.len();
            let mut decl = String::new();
            let _ = write!(
                decl,
                "const long td_next{k} = td_row + 1 < {} ? {delta} : 0;",
                plan.rows
            );
            ahead.decls.push(decl);
            ahead.prefetch.push(format!(
                "TD_PREFETCH(&t{}[{} + td_next{k}]);",
                a.tensor,
                offset_expr(shape, &coords)
            ));
        }
        ahead
    }
}

//! A GPU row held in registers: each thread's points of a row of several passes are read
//! once, into register arrays, and the later passes reuse them.
//!
//! Without this, softmax and layer norm read their input row in every pass (the row's
//! `max` or `mean`, the sum, the output), and the later passes find it in L1 only while the
//! SM's resident rows fit there. Where every pass of a row walks the same points in the
//! same order, a thread's `k`-th point is the same in every pass, so a read that two or
//! more passes make (softmax's and layer norm's `x[[i, j]]`) is loaded once into
//! `td_c<n>[k]`, up front, all of a thread's loads in flight together; and a reduction's
//! body that the output's body contains (softmax's `exp(x - m)`, [`RowPlan::stash`]) is
//! kept in `td_s[k]` by the sum's pass instead of being computed again. The passes become
//! fully unrolled loops over `k` (the arrays stay in registers).
//!
//! Only where it pays and fits: at least two passes over the row, at most
//! [`POINTS_MAX`] points per thread, at most [`REGISTERS_MAX`] registers of arrays, and only
//! reads that need no bound check (padded windows keep the plain loops).

use super::{replace_with_output, Printer};
use crate::codegen::ExprPrinter;
use crate::ir::{Access, Expr};
use crate::template::rows::{RowPlan, RowStmt, Target};
use std::fmt::Write as _;

/// The most points of a row one thread holds.
pub(super) const POINTS_MAX: usize = 32;

/// The most registers the arrays may take per thread (points × arrays).
pub(super) const REGISTERS_MAX: usize = 64;

/// How a row is held in registers (see the module docs).
pub(super) struct Registers<'a> {
    /// The points of every pass (flat, over `ids`).
    points: usize,
    /// The pass's indices.
    ids: Vec<usize>,
    /// Threads per row.
    threads: usize,
    /// Points per thread: `points / threads` rounded up.
    per_thread: usize,
    /// The reads kept in `td_c<n>`, in order of first use.
    reads: Vec<&'a Access>,
    /// The stage whose values are kept in `td_s` (an index into the plan's statements)
    /// and its body.
    stash: Option<(usize, &'a Expr)>,
}

/// The points a statement of a row walks, if it loops.
fn walked<'s>(st: &'s RowStmt<'_>) -> Option<&'s [usize]> {
    match (st.reducer, st.target) {
        (Some(_), _) => Some(&st.over),
        (None, Target::Output) => Some(&st.inner),
        (None, Target::Temp(_)) => None,
    }
}

impl<'a> Registers<'a> {
    /// How a row of `plan` with `threads` threads is held, or `None` where it is not.
    pub fn of(p: &Printer<'_>, plan: &RowPlan<'a>, threads: usize) -> Option<Registers<'a>> {
        let passes: Vec<&RowStmt<'a>> = plan
            .stmts
            .iter()
            .filter(|st| walked(st).is_some())
            .collect();
        let ids = walked(passes.first()?)?;
        if passes.len() < 2 || passes.iter().any(|st| walked(st) != Some(ids)) {
            return None;
        }
        let points = p.points(ids);
        let per_thread = points.div_ceil(threads.max(1));
        if points == 0 || per_thread > POINTS_MAX {
            return None;
        }
        // Reads of the row (they move with a pass's index) that need no bound check, read
        // by at least two passes.
        let mut reads: Vec<&'a Access> = Vec::new();
        for (n, st) in passes.iter().enumerate() {
            st.body.visit_accesses(&mut |a| {
                let moves = a
                    .dims
                    .iter()
                    .any(|d| d.terms.iter().any(|(v, _)| ids.contains(v)));
                let later = passes[n + 1..].iter().any(|o| reads_access(o.body, a));
                if moves
                    && later
                    && p.inside(&Expr::Access(a.clone())).is_empty()
                    && !reads.contains(&a)
                {
                    reads.push(a);
                }
            });
        }
        let stash = plan
            .stash
            .map(|at| (at, plan.stmts[at].body))
            .filter(|(_, body)| p.inside(body).is_empty());
        let arrays = reads.len() + usize::from(stash.is_some());
        if arrays == 0 || arrays * per_thread > REGISTERS_MAX {
            return None;
        }
        Some(Registers {
            points,
            ids: ids.to_vec(),
            threads,
            per_thread,
            reads,
            stash,
        })
    }

    /// Declares the arrays and loads the reads (at the top of a row).
    pub fn prologue(&self, s: &mut String, p: &Printer<'_>, ind: &str) {
        let k = self.per_thread;
        for n in 0..self.reads.len() {
            let _ = writeln!(s, "{ind}float td_c{n}[{k}];");
        }
        if self.stash.is_some() {
            let _ = writeln!(s, "{ind}float td_s[{k}];");
        }
        let _ = writeln!(
            s,
            "{ind}/* The row's reads, once: every later pass uses them. */"
        );
        self.open(s, p, ind);
        for (n, a) in self.reads.iter().enumerate() {
            let load = p.load(a);
            let _ = writeln!(s, "{ind}        td_c{n}[td_k] = {load};");
        }
        self.close(s, ind);
    }

    /// Opens the unrolled loop over a thread's points: `td_k`, then `td_p` (the flat point)
    /// and the pass's indices are set, inside a check where the last thread's points run
    /// past the row.
    pub fn open(&self, s: &mut String, p: &Printer<'_>, ind: &str) {
        let (k, t, n) = (self.per_thread, self.threads, self.points);
        let _ = writeln!(s, "{ind}#pragma unroll");
        let _ = writeln!(s, "{ind}for (int td_k = 0; td_k < {k}; ++td_k) {{");
        let _ = writeln!(s, "{ind}    const long td_p = td_lane + (long)td_k * {t};");
        if k * t == n {
            let _ = writeln!(s, "{ind}    {{");
        } else {
            let _ = writeln!(s, "{ind}    if (td_p < {n}) {{");
        }
        p.decompose(s, &format!("{ind}        "), &self.ids, "td_p");
    }

    /// Closes [`Registers::open`].
    pub fn close(&self, s: &mut String, ind: &str) {
        let _ = writeln!(s, "{ind}    }}");
        let _ = writeln!(s, "{ind}}}");
    }

    /// The register holding `a` at the current point, if it is kept.
    pub fn read(&self, a: &Access) -> Option<String> {
        let n = self.reads.iter().position(|r| *r == a)?;
        Some(format!("td_c{n}[td_k]"))
    }

    /// Whether statement `at` of the plan is the stage whose values are kept.
    pub fn stashes(&self, at: usize) -> bool {
        self.stash.is_some_and(|(s, _)| s == at)
    }

    /// The output's body printed with the kept stage's values (`td_s[td_k]`) and reads.
    pub fn output_body(&self, p: &Printer<'_>, body: &Expr) -> String {
        let body = match self.stash {
            Some((_, part)) => replace_with_output(body, part),
            None => body.clone(),
        };
        let printer = ExprPrinter {
            kernel: p.expr.kernel,
            shapes: p.expr.shapes,
            extents: p.expr.extents,
            index: p.expr.index.clone(),
            tensor: p.expr.tensor.clone(),
            output: "td_s[td_k]".into(),
            packed: None,
        };
        printer.expr_with(&body, &|a| self.read(a))
    }
}

/// Whether `e` reads `a`.
fn reads_access(e: &Expr, a: &Access) -> bool {
    let mut found = false;
    e.visit_accesses(&mut |b| found |= b == a);
    found
}

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
//! Knobs: on the CPU ([`RowsCpuConfig`]) whether rows run in parallel (OpenMP) and whether
//! the loops in a row are vectorized (`omp simd` with the reduction clause); on the GPU
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

use crate::ir::{Expr, Kernel, Reducer};
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
}

fn points(ids: &[usize], extents: &[usize]) -> usize {
    ids.iter().map(|&i| extents[i]).product()
}

impl<'a> RowPlan<'a> {
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
        Ok(RowPlan {
            rows: points(&outer, extents),
            outer,
            stmts,
            row_len,
        })
    }
}

/// The CPU knobs of the row template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RowsCpuConfig {
    /// Rows run in parallel (`omp parallel for`).
    pub parallel: bool,
    /// The loops in a row are vectorized (`omp simd`, with a reduction clause).
    pub vector: bool,
}

impl RowsCpuConfig {
    /// Parallel when there are several rows and enough work to share; always vectorized.
    pub fn heuristic(plan: &RowPlan<'_>) -> RowsCpuConfig {
        RowsCpuConfig {
            parallel: plan.rows > 1 && plan.rows.saturating_mul(plan.row_len) >= 1 << 15,
            vector: true,
        }
    }

    /// Every configuration (the whole space: four points).
    pub fn all() -> Vec<RowsCpuConfig> {
        [(false, false), (false, true), (true, false), (true, true)]
            .into_iter()
            .map(|(parallel, vector)| RowsCpuConfig { parallel, vector })
            .collect()
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
    /// About 8 points of the longest row loop per thread (at most 1024 threads per row),
    /// and blocks of at least 128 threads.
    pub fn heuristic(plan: &RowPlan<'_>) -> RowsGpuConfig {
        let per = plan.row_len.div_ceil(8).clamp(1, 1024);
        let t = per.next_power_of_two().min(1024) as u32;
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

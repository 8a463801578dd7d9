//! The library baselines a user would pick instead of us, next to the `matrixmultiply`
//! column ([`crate::baseline`]): OpenBLAS `sgemm` ([`crate::openblas`]), oneDNN
//! ([`crate::onednn`]), each loaded at run time, and ONNX Runtime ([`crate::ort`]). A library that is not installed is a
//! skipped column with a one-line message (printed once per process), never a failure.

use crate::workloads::Op;
use tensor_dsl::ir::DType;

/// One library baseline for one workload, set up once (plans, weight reorders) and then
/// called repeatedly in the timed rounds.
pub trait Baseline {
    /// The column's name, with the library's version where it says it.
    fn name(&self) -> String;
    /// One timed call: reads `inputs` (the kernel's inputs in parameter order) and writes
    /// the result into `out`, or into the baseline's own buffer (see [`Baseline::fetch`]).
    fn run(&mut self, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), String>;
    /// After [`Baseline::run`], the result in the kernel's output layout into `out`
    /// (untimed). The default does nothing: `run` already wrote `out`.
    fn fetch(&mut self, _out: &mut [f32]) -> Result<(), String> {
        Ok(())
    }
    /// Seconds to wait after a round of its calls before the next contender runs (its idle
    /// threads' spinning must not be charged to the next one).
    fn settle(&self) -> f64 {
        0.0
    }
    /// For a baseline that runs in another process: `calls` calls timed on its side, the
    /// median seconds of one (see [`crate::timing::SelfTimed`]). `None`: time
    /// [`Baseline::run`] here.
    fn time_calls(&mut self, _calls: usize) -> Option<Result<f64, String>> {
        None
    }
}

/// A baseline column: set up, or why it is skipped.
pub enum Column {
    Ready {
        library: &'static str,
        baseline: Box<dyn Baseline>,
    },
    Skipped {
        library: &'static str,
        name: String,
        reason: String,
    },
}

/// Prints `bench: <what> skipped: <why>` once per process per library.
fn say_skipped(what: &str, reason: &str) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said
        .get_or_insert_with(HashSet::new)
        .insert(what.to_string())
    {
        eprintln!("bench: {what} baseline skipped: {reason}");
    }
}

fn column(library: &'static str, name: String, made: Result<Box<dyn Baseline>, String>) -> Column {
    match made {
        Ok(baseline) => Column::Ready { library, baseline },
        Err(reason) => {
            say_skipped(library, &reason);
            Column::Skipped {
                library,
                name,
                reason,
            }
        }
    }
}

/// Every library baseline for `op`, set up on `inputs` (the kernel's inputs in parameter
/// order): OpenBLAS, then oneDNN (matmul; or convolution in its own layouts without and
/// with the NCHW reorders), then ONNX Runtime ([`crate::ort`]; the only one for the
/// `stages` suite).
///
/// With half-precision operands (`dtype`), the libraries' matmuls and convolutions in that
/// precision (oneDNN's; `f32` output; the convolution without and with the NCHW reorders),
/// the only like-for-like columns; nothing for other ops.
pub fn for_op(op: &Op, inputs: &[&[f32]], dtype: DType) -> Vec<Column> {
    if dtype != DType::F32 {
        return match op {
            Op::Matmul { .. } | Op::BatchMatmul { .. } => vec![column(
                "oneDNN",
                format!("oneDNN {dtype} matmul"),
                crate::onednn::Matmul::typed(op, dtype).map(|b| Box::new(b) as Box<dyn Baseline>),
            )],
            Op::Conv2d(cv) => [false, true]
                .into_iter()
                .map(|with_reorders| {
                    column(
                        "oneDNN",
                        crate::onednn::conv_name(dtype, with_reorders, None),
                        crate::onednn::Conv::typed(cv, inputs, with_reorders, dtype)
                            .map(|b| Box::new(b) as Box<dyn Baseline>),
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
    }
    if let Op::GemmBiasRelu { .. } = op {
        // OpenBLAS's GEMM, then the epilogue as a separate pass (`crate::baseline::run_on`);
        // oneDNN and ONNX Runtime get no graph for it here.
        return vec![column(
            "OpenBLAS",
            crate::openblas::name(op),
            crate::openblas::Baseline::new(op).map(|b| Box::new(b) as Box<dyn Baseline>),
        )];
    }
    let ort = column(
        "ONNX Runtime",
        crate::ort::graph(op).0,
        crate::ort::Ort::for_op(op, inputs).map(|b| Box::new(b) as Box<dyn Baseline>),
    );
    if let Op::Stage(_) = op {
        return vec![ort];
    }
    let mut columns = vec![column(
        "OpenBLAS",
        crate::openblas::name(op),
        crate::openblas::Baseline::new(op).map(|b| Box::new(b) as Box<dyn Baseline>),
    )];
    match op {
        Op::GemmBiasRelu { .. } => {}
        Op::Matmul { .. } | Op::BatchMatmul { .. } => columns.push(column(
            "oneDNN",
            "oneDNN matmul".into(),
            crate::onednn::Matmul::new(op).map(|b| Box::new(b) as Box<dyn Baseline>),
        )),
        Op::Stage(_) => {}
        Op::Conv2d(cv) => {
            for with_reorders in [false, true] {
                columns.push(column(
                    "oneDNN",
                    crate::onednn::conv_name(DType::F32, with_reorders, None),
                    crate::onednn::Conv::new(cv, inputs, with_reorders)
                        .map(|b| Box::new(b) as Box<dyn Baseline>),
                ));
            }
        }
    }
    columns.push(ort);
    columns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::testing::{assert_close, cases, reference};

    /// Every library baseline that is installed agrees with the reference interpreter on
    /// small awkward shapes (run twice: set-up state must not leak between calls); a
    /// missing library is reported and skipped.
    #[test]
    fn library_baselines_match_the_reference() {
        let mut ran = std::collections::BTreeMap::<String, usize>::new();
        let mut names = std::collections::BTreeSet::new();
        for op in cases() {
            let (data, want) = reference(&op);
            let refs: Vec<&[f32]> = data.iter().map(Vec::as_slice).collect();
            for column in for_op(&op, &refs, DType::F32) {
                match column {
                    Column::Ready {
                        library,
                        mut baseline,
                    } => {
                        let name = baseline.name();
                        for _ in 0..2 {
                            let mut got = vec![f32::NAN; want.len()];
                            baseline.run(&refs, &mut got).unwrap();
                            baseline.fetch(&mut got).unwrap();
                            assert_close(&name, &op, &got, &want);
                        }
                        *ran.entry(library.to_string()).or_default() += 1;
                        names.insert(name);
                    }
                    Column::Skipped { name, reason, .. } => {
                        eprintln!("skipped {name}: {reason}");
                    }
                }
            }
        }
        eprintln!("checked: {ran:?}\n{names:#?}");
    }

    /// `op`'s inputs rounded to `dtype` (values exact in it, as the bench's are) and the
    /// reference output on them.
    fn exact_inputs(op: &Op, dtype: DType) -> (Vec<Vec<f32>>, Vec<f32>) {
        let (data, _) = reference(op);
        let exact: Vec<Vec<f32>> = data
            .iter()
            .map(|v| tensor_dsl::Buffer::from_f32(dtype, v).to_f32())
            .collect();
        let (_, want) = crate::baseline::testing::reference_on(op, &exact);
        (exact, want)
    }

    /// A half-precision column on `exact`: twice, then on a moved copy of the inputs, each
    /// result against `want`. The column's name, or `None` (said why) where it is skipped.
    fn check_half_column(
        column: Column,
        op: &Op,
        exact: &[Vec<f32>],
        want: &[f32],
    ) -> Option<String> {
        match column {
            Column::Ready { mut baseline, .. } => {
                let name = baseline.name();
                let moved = exact.to_vec();
                for data in [exact, exact, &moved] {
                    let refs: Vec<&[f32]> = data.iter().map(Vec::as_slice).collect();
                    let mut got = vec![f32::NAN; want.len()];
                    baseline.run(&refs, &mut got).unwrap();
                    baseline.fetch(&mut got).unwrap();
                    assert_close(&name, op, &got, want);
                }
                Some(name)
            }
            Column::Skipped { name, reason, .. } => {
                eprintln!("skipped {name}: {reason}");
                None
            }
        }
    }

    /// oneDNN's bf16 matmul, where this CPU has one, on inputs exact in bf16 (as the bench's
    /// are) agrees with the reference; twice, and again after the inputs moved.
    #[test]
    fn bf16_matmul_columns_match_the_reference() {
        for op in cases() {
            if !matches!(op, Op::Matmul { .. } | Op::BatchMatmul { .. }) {
                continue;
            }
            let (exact, want) = exact_inputs(&op, DType::BF16);
            for column in for_op(&op, &[&exact[0], &exact[1]], DType::BF16) {
                check_half_column(column, &op, &exact, &want);
            }
        }
    }

    /// oneDNN's half-precision convolutions, both columns, where this CPU has an optimized
    /// one, on inputs exact in the type (as the bench's are) agree with the reference;
    /// twice, and again after the inputs moved. Where it has none they are skipped, saying
    /// why.
    #[test]
    fn half_conv_columns_match_the_reference() {
        let mut checked = Vec::new();
        for dtype in [DType::BF16, DType::F16] {
            for op in cases() {
                if !matches!(op, Op::Conv2d(_)) {
                    continue;
                }
                let (exact, want) = exact_inputs(&op, dtype);
                let columns = for_op(&op, &[&exact[0], &exact[1]], dtype);
                assert_eq!(columns.len(), 2, "{dtype} {op:?}: two oneDNN columns");
                for column in columns {
                    if let Some(name) = check_half_column(column, &op, &exact, &want) {
                        assert!(name.contains(&format!(" {dtype} conv ")), "{name}");
                        checked.push(name);
                    }
                }
            }
        }
        eprintln!("checked: {checked:#?}");
    }
}

//! One kernel on the CPU: tune, then time our best config, the baseline and the untuned
//! default side by side, after checking our output against the baseline's.

use std::path::Path;
use std::time::Duration;
use tensor_dsl::ir::DType;
use tensor_dsl::measure::cpu::CpuMeasurer;
use tensor_dsl::runtime::cpu::{self, CpuError};
use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};

use crate::baseline;
use crate::baselines::{self, Column};
use crate::load;
use crate::report::{BaselineResult, KernelResult};
use crate::timing::{self, Plan, Run, Timing};
use crate::tuning::{self, Settings, TrialLog};
use crate::workloads::Op;
use crate::workloads::{Problem, Workload};

/// Options for one kernel's run.
pub struct Options<'a> {
    pub settings: &'a Settings,
    pub plan: Plan,
    /// Before timing, wait up to this long for the machine to be at most 25% busy.
    pub wait_quiet: Duration,
    pub landscape: Option<&'a Path>,
    /// Print a line per trial.
    pub verbose: bool,
    /// Time the library baselines (OpenBLAS, oneDNN) too.
    pub libraries: bool,
}

fn cpu_err(e: CpuError) -> String {
    match e {
        CpuError::NoCompiler(m) => format!("no usable C compiler: {m}"),
        CpuError::Other(e) => e.to_string(),
    }
}

/// The first element where `got` and `want` differ by more than 1e-3 relative (1e-3
/// absolute below magnitude 1), and the largest absolute difference.
pub fn compare(got: &[f32], want: &[f32]) -> (Option<String>, f64) {
    compare_within(got, want, 1e-3)
}

/// [`compare`] with the relative tolerance `rel` (for half-precision outputs).
pub fn compare_within(got: &[f32], want: &[f32], rel: f32) -> (Option<String>, f64) {
    let mut first = None;
    let mut max_diff = 0.0f64;
    if got.len() != want.len() {
        return (
            Some(format!("{} elements, expected {}", got.len(), want.len())),
            f64::NAN,
        );
    }
    for (n, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = f64::from((g - w).abs());
        if d.is_nan() || d > f64::from(rel) * f64::from(w.abs().max(1.0)) {
            first.get_or_insert_with(|| format!("element {n}: ours {g}, baseline {w}"));
        }
        if d.is_nan() {
            max_diff = f64::NAN;
        } else if d > max_diff {
            max_diff = d;
        }
    }
    (first, max_diff)
}

/// The largest `|got − want| / max(|want|, 1)` (NaN if any element is NaN or the lengths
/// differ).
pub fn max_rel_err(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::NAN;
    }
    let mut max = 0.0f64;
    for (&g, &w) in got.iter().zip(want) {
        let e = f64::from((g - w).abs()) / f64::from(w.abs().max(1.0));
        if e.is_nan() {
            return f64::NAN;
        }
        max = max.max(e);
    }
    max
}

/// Runs a library baseline once and checks it against `want` (our checked output): the
/// baseline and its error, or why it is not timed.
fn check_baseline(
    b: &mut dyn baselines::Baseline,
    inputs: &[&[f32]],
    want: &[f32],
) -> Result<f64, String> {
    let mut out = vec![f32::NAN; want.len()];
    b.run(inputs, &mut out)?;
    b.fetch(&mut out)?;
    let err = max_rel_err(&out, want);
    if err.is_finite() && err <= 1e-3 {
        Ok(err)
    } else {
        Err(format!(
            "its output differs from ours: max relative error {err:.2e}"
        ))
    }
}

/// The element type of `kernel`'s half-precision inputs (the first one's), else `f32`.
pub fn operand_type(kernel: &tensor_dsl::ir::Kernel) -> DType {
    kernel
        .params
        .iter()
        .filter(|p| !p.is_output)
        .map(|p| p.dtype)
        .find(|&d| d != DType::F32)
        .unwrap_or(DType::F32)
}

/// Tunes and times one workload; every failure lands in the result, never as an `Err`.
pub fn run(w: &Workload, problem: &Problem, opts: &Options<'_>) -> KernelResult {
    let mut r = KernelResult::empty(&w.suite, &w.name, w.shape.clone(), baseline::name(&w.op));
    r.kernel = problem.kernel.to_string();
    r.tensor_shapes = problem.shapes.clone();
    r.flops = problem.flops();
    r.strategy = opts.settings.strategy.clone();
    r.start_from_default = opts.settings.start_from_default;
    r.seed = opts.settings.seed;
    if let Err(e) = run_into(w, problem, opts, &mut r) {
        r.fail(e);
    }
    r
}

fn run_into(
    w: &Workload,
    problem: &Problem,
    opts: &Options<'_>,
    r: &mut KernelResult,
) -> Result<(), String> {
    let (kernel, extents) = (&problem.kernel, &problem.extents);
    let template = CpuTemplate::new(kernel, extents, cpu::simd_lanes())
        .map_err(|e| format!("building the CPU space: {e}"))?;

    // The weights (a matmul's right operand, a convolution's filters: what ONNX Runtime's
    // graphs hold as constants) stay unchanged between calls: the tuner times candidates
    // on them packed ahead, as the side-by-side timing below runs them.
    let weights: &[usize] = match w.op {
        Op::Matmul { .. } | Op::GemmBiasRelu { .. } | Op::Conv2d(_) => &[1],
        Op::BatchMatmul { .. } | Op::Stage(_) => &[],
    };

    // --- tune -----------------------------------------------------------------------
    let tuned = {
        let mut measurer = CpuMeasurer::new(kernel, &problem.shapes, template.clone())
            .map_err(|e| format!("preparing the measurer: {e}"))?
            .with_constant_inputs(weights);
        let mut log = TrialLog::new(
            w,
            problem,
            opts,
            template.space(),
            tensor_dsl::records::Target::this_cpu(),
            tensor_dsl::codegen::c::CODEGEN_VERSION,
        );
        let tuned = tuning::tune(problem, &template, &mut measurer, opts.settings, &mut |t| {
            log.trial(t)
        })?;
        log.finish();
        if opts.verbose {
            let t = measurer.timings();
            eprintln!(
                "  {}/{} tuning took {:.1} s: search and cost model {:.1} s, measuring {}",
                w.suite,
                w.name,
                tuned.seconds,
                tuned.seconds - t.compile - t.run,
                t
            );
        }
        tuned
    };
    let best = tuned.report(r, template.space(), Some(&template.default_config()))?;
    let ours_cfg = template.decode(&best)?;
    let default_cfg = template.decode(&template.default_config())?;

    // --- check and time side by side ----------------------------------------------
    // How busy the others keep the machine (nothing of ours runs now).
    r.machine_busy = if opts.wait_quiet.is_zero() {
        load::busy(Duration::from_millis(500))
    } else {
        load::wait_quiet(0.25, opts.wait_quiet)
    };
    // The inputs are tensors, as a caller's would be; the weights (a matmul's right operand, a
    // convolution's filters: what ONNX Runtime's graphs hold as constants) keep their
    // version while unchanged, which lets our kernel keep them packed between calls. The
    // other inputs go without one, as activations that change at every call would.
    // With half-precision operands our kernel reads them in their type; the `f32` tensors
    // hold the same values (exact in `f32`), which the `f32` reference reads, and their
    // versions stand for the typed copies too (one content each).
    let typed =
        tensor_dsl::measure::random_inputs(&problem.kernel, &problem.shapes, opts.settings.seed);
    let operands = operand_type(&problem.kernel);
    let tensors = typed
        .iter()
        .map(|b| {
            // Flat: the output's slot is empty; the shapes are checked at the call.
            let values = b.to_f32();
            tensor_dsl::Tensor::from_vec(vec![values.len()], values)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let refs: Vec<&[f32]> = tensors.iter().map(|t| t.as_slice()).collect();
    let views: Vec<tensor_dsl::Data<'_>> = if operands == DType::F32 {
        refs.iter().map(|&r| r.into()).collect()
    } else {
        typed.iter().map(tensor_dsl::Buffer::view).collect()
    };
    let versions: Vec<Option<u64>> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| weights.contains(&i).then(|| t.version()))
        .collect();
    let shapes = problem.shape_refs();
    let out_len: usize = problem.shapes[kernel.output].iter().product();
    let mut ours_out = vec![f32::NAN; out_len];
    let mut base_out = vec![f32::NAN; out_len];
    let mut default_out = vec![f32::NAN; out_len];
    let mut scratch = baseline::Scratch::default();
    let run_ours = |cfg: &CpuConfig, out: &mut [f32]| {
        cpu::run_with_versions(kernel, extents, &shapes, &views, &versions, out.into(), cfg)
            .map_err(cpu_err)
    };
    // Where the weights can stay packed, also the call that packs them itself (no versions).
    let repacks = !weights.is_empty() && (ours_cfg.conv.is_some() || ours_cfg.pack);
    let run_repacking = |out: &mut [f32]| {
        cpu::run_with(kernel, extents, &shapes, &views, out.into(), &ours_cfg).map_err(cpu_err)
    };
    run_ours(&ours_cfg, &mut ours_out)?;
    run_ours(&default_cfg, &mut default_out)?;
    baseline::run(&w.op, &refs, &mut base_out, &mut scratch)?;
    let (mismatch, max_diff) = compare(&ours_out, &base_out);
    r.max_abs_diff = Some(max_diff).filter(|d| d.is_finite());
    if let Some(m) = mismatch {
        return Err(format!("our output differs from the baseline's: {m}"));
    }
    if let (Some(m), _) = compare(&default_out, &base_out) {
        return Err(format!(
            "the default schedule's output differs from the baseline's: {m}"
        ));
    }
    // The library baselines: each checked against our (checked) output before timing.
    let columns = if opts.libraries {
        baselines::for_op(&w.op, &refs, operands)
    } else {
        Vec::new()
    };
    let mut timed: Vec<(&'static str, String, f64, Box<dyn baselines::Baseline>)> = Vec::new();
    let mut untimed = Vec::new();
    for column in columns {
        match column {
            Column::Ready {
                library,
                mut baseline,
            } => {
                let name = baseline.name();
                match check_baseline(baseline.as_mut(), &refs, &ours_out) {
                    Ok(err) => timed.push((library, name, err, baseline)),
                    Err(e) => {
                        eprintln!("bench: {}/{}: {name} not timed: {e}", w.suite, w.name);
                        untimed.push(BaselineResult::skipped(library, &name, e));
                    }
                }
            }
            Column::Skipped {
                library,
                name,
                reason,
            } => untimed.push(BaselineResult::skipped(library, &name, reason)),
        }
    }
    let mut lib_outs: Vec<Vec<f32>> = timed.iter().map(|_| vec![0.0f32; out_len]).collect();
    // Checked, our kernels write one output buffer while timed, so that the tuned point
    // and the default (often the same config) run on the same memory: with a buffer each,
    // one config was timed 1.4–1.6× apart in the two slots in a run on an AVX2 VM, and
    // 5–15% apart in reruns (`bench/results/2026-11-27-zen3-cpu-kblock/`).
    let ours_timed = std::cell::RefCell::new(std::mem::take(&mut ours_out));
    // Timed in the order ours, the repacking call, the default, the baseline (then the
    // libraries): turns alternate forwards and backwards, so each contender follows its
    // neighbours in that order, and ours and the default both neighbour the repacking call
    // (the same code) and one other library. With the default alone next to the repacking
    // call, the same config ran 0.1–25% slower in ours' slot than in the default's in all
    // 17 such rows of two runs on the Zen 3 VM (`bench/results/2026-11-27-zen3-cpu-xcopy/`).
    let timings = {
        let mut contenders: Vec<Run<'_>> = vec![Run::Call(Box::new(|| {
            run_ours(&ours_cfg, &mut ours_timed.borrow_mut())
        }))];
        if repacks {
            contenders.push(Run::Call(Box::new(|| {
                run_repacking(&mut ours_timed.borrow_mut())
            })));
        }
        contenders.push(Run::Call(Box::new(|| {
            run_ours(&default_cfg, &mut ours_timed.borrow_mut())
        })));
        contenders.push(Run::Call(Box::new(|| {
            baseline::run(&w.op, &refs, &mut base_out, &mut scratch)
        })));
        let mut settle = vec![0.0; contenders.len()];
        for ((_, _, _, b), out) in timed.iter_mut().zip(lib_outs.iter_mut()) {
            settle.push(b.settle());
            let refs = &refs;
            if b.time_calls(1).is_some() {
                // Timed in its own process (ONNX Runtime's helper).
                contenders.push(Run::Own(Box::new(move |n| {
                    b.time_calls(n)
                        .unwrap_or_else(|| Err("stopped timing itself".into()))
                })));
            } else {
                contenders.push(Run::Call(Box::new(move || b.run(refs, out))));
            }
        }
        timing::side_by_side(&mut contenders, opts.plan, &settle)?
    };
    let (main, libs) = timings.split_at((3 + usize::from(repacks)).min(timings.len()));
    // Back in the order the report reads: ours, the baseline, the default, the repacking call.
    let main: Vec<Timing> = if repacks { [0, 3, 2, 1] } else { [0, 2, 1, 3] }
        .iter()
        .filter_map(|&i| main.get(i).cloned())
        .collect();
    r.timed(&main)?;
    for ((library, name, err, _), t) in timed.iter().zip(libs) {
        r.timed_baseline(library, name, *err, t);
    }
    r.baselines.extend(untimed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_errors() {
        assert_eq!(max_rel_err(&[1.0, 200.0], &[1.0, 200.0]), 0.0);
        assert!((max_rel_err(&[0.5, 202.0], &[0.5, 200.0]) - 0.01).abs() < 1e-6);
        assert!((max_rel_err(&[0.01], &[0.0]) - 0.01).abs() < 1e-6);
        assert!(max_rel_err(&[f32::NAN], &[1.0]).is_nan());
        assert!(max_rel_err(&[1.0], &[1.0, 2.0]).is_nan());
    }

    #[test]
    fn compare_flags_the_first_mismatch() {
        assert_eq!(compare(&[1.0, 2.0], &[1.0, 2.0005]).0, None);
        let (m, d) = compare(&[1.0, 2.0, 9.0], &[1.0, 2.1, 9.5]);
        assert!(m.unwrap().starts_with("element 1"));
        assert!((d - 0.5).abs() < 1e-6);
        assert!(compare(&[f32::NAN], &[1.0]).0.is_some());
    }
}

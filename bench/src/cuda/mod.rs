//! One kernel on the GPU: tune the GPU template with [`CudaMeasurer`], then check and time
//! our best schedule, the cuBLAS/cuDNN baseline and the untuned default side by side on the
//! same stream and buffers.
//!
//! Timing, for ours and the libraries alike, through the runtime's one timing helper
//! ([`tensor_dsl::runtime::graph_timing::Timer`]): each contender's call is captured N times
//! into a CUDA graph (N such that a round lasts about `--round-seconds`), and a round replays
//! the graph between two CUDA events, giving its mean seconds per call; a library call that
//! cannot be captured is queued N times behind a spin kernel instead (the report's `timing`
//! says which). Either way the host's launch rate does not count, which matters for kernels
//! of a few microseconds. Rounds alternate between the contenders (ours, baseline, default,
//! ours, ...), and each reports the median of its rounds. Everything runs on the runtime's
//! stream, from this one thread.

mod baseline;
mod dnn;
mod dnn_rows;
mod epilogue;
mod gemm_plan;

use tensor_dsl::measure::cuda::CudaMeasurer;
use tensor_dsl::records::Target;
use tensor_dsl::runtime::cuda::{self, DeviceBuffer};
use tensor_dsl::runtime::graph_timing::{Timer, TimingPlan};
use tensor_dsl::template::cuda::CudaSpace;
use tensor_dsl::transfer::cuda_features;
use tuner::Trial;

use crate::report::KernelResult;
use crate::run::{compare_within, Options};
use crate::timing::{median, Timing};
use crate::tuning::{search, Bounded, Settings, TrialLog, Tuned};
use crate::workloads::{Op, Problem, Workload};

pub use baseline::name as baseline_name;

/// The one element type of the contraction's two operands (the first two inputs), or of a
/// stage kernel's input.
fn operand_dtype(problem: &Problem) -> Result<tensor_dsl::ir::DType, String> {
    let k = &problem.kernel;
    match k.inputs()[..] {
        [x] => Ok(k.params[x].dtype),
        [a, b, ..] => baseline::operand_dtype(k.params[a].dtype, k.params[b].dtype),
        _ => Err("the kernel has no input".into()),
    }
}

/// What the report says about the GPU (name, index, architecture, SMs, memory, driver).
pub fn describe_gpu() -> Result<String, String> {
    cuda::available().map(|info| info.to_string())
}

/// Tunes and times one workload on the GPU; every failure lands in the result.
pub fn run(w: &Workload, problem: &Problem, opts: &Options<'_>) -> KernelResult {
    let dtype = operand_dtype(problem).unwrap_or_default();
    let mut r = KernelResult::empty(
        &w.suite,
        &w.name,
        w.shape.clone(),
        &baseline::name(&w.op, dtype),
    );
    r.device = "cuda".into();
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

/// The GPU measurer's per-launch limit, never under 1 ms (one event-timed launch of a tiny
/// kernel is noisy) nor over 10 s.
fn gpu_limit(m: &mut CudaMeasurer, per_call: f64) {
    m.max_seconds = per_call.clamp(1e-3, 10.0);
}

fn tune(
    problem: &Problem,
    template: &CudaSpace,
    measurer: &mut CudaMeasurer,
    settings: &Settings,
    on_trial: &mut dyn FnMut(&Trial),
) -> Result<Tuned, String> {
    let target = measurer.target().clone();
    // The analytic features read the SIMT nest; tensor-core points have knob features only.
    let features = cuda_features(
        &problem.kernel,
        &problem.extents,
        &problem.shapes,
        template,
        &target,
    );
    let mut bounded = Bounded {
        flops: measurer.flops(),
        inner: measurer,
        apply: gpu_limit,
        kill_factor: settings.kill_factor,
        floor_gflops: settings.floor_gflops,
        best: None,
    };
    // The one search, without transfer: the GPU bench's knob-and-analytic features are
    // not the layout `transfer::cuda_prior` builds (its CUDA space may be tensor cores).
    search(
        template.space(),
        settings.default_point(template.default_point()?),
        &tensor_dsl::transfer::Prior::default(),
        settings,
        &features,
        &mut bounded,
        on_trial,
    )
}

/// A contender: queues one call on the runtime's stream.
type Enqueue<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;

/// The most calls one round's graph captures.
const MAX_LAUNCHES_PER_ROUND: usize = 2_000;

/// A timer of `f` on the runtime's stream (see the module docs): `warmup` calls first, then
/// rounds of at least `round_seconds`.
pub(crate) fn timer<'a>(
    mut f: Enqueue<'a>,
    warmup: usize,
    round_seconds: f64,
) -> Result<Timer<'a>, String> {
    let plan = TimingPlan {
        warmup,
        min_sample_seconds: round_seconds,
        max_launches: MAX_LAUNCHES_PER_ROUND,
    };
    Timer::new(
        None,
        &plan,
        Box::new(move |_| {
            f().map_err(|message| tensor_dsl::Error::Backend {
                kernel: "bench".into(),
                message,
            })
        }),
    )
    .map_err(|e| e.to_string())
}

/// How a timer times: `graph of N` or `spin + N (why)`.
fn describe_timer(t: &Timer<'_>) -> String {
    match t.note() {
        None => format!("{} of {}", t.method(), t.launches()),
        Some(note) => format!("{} of {} ({note})", t.method(), t.launches()),
    }
}

/// Times the contenders in alternating rounds (see the module docs); also says how each was
/// timed.
fn side_by_side(
    contenders: Vec<Enqueue<'_>>,
    rounds: usize,
    round_seconds: f64,
) -> Result<(Vec<Timing>, String), String> {
    let mut timers = contenders
        .into_iter()
        .map(|f| timer(f, 3, round_seconds))
        .collect::<Result<Vec<_>, _>>()?;
    let how = timers
        .iter()
        .map(describe_timer)
        .collect::<Vec<_>>()
        .join(" / ");
    let mut per_round = vec![Vec::with_capacity(rounds); timers.len()];
    for _ in 0..rounds.max(1) {
        for (i, t) in timers.iter_mut().enumerate() {
            let s = t.samples(1).map_err(|e| e.to_string())?;
            per_round[i].extend(s);
        }
    }
    let timings = per_round
        .into_iter()
        .map(|r| Timing {
            median: median(&r),
            rounds: r,
        })
        .collect();
    Ok((timings, how))
}

fn run_into(
    w: &Workload,
    problem: &Problem,
    opts: &Options<'_>,
    r: &mut KernelResult,
) -> Result<(), String> {
    let info = cuda::available()?;
    let target = info.target();
    let (kernel, extents) = (&problem.kernel, &problem.extents);
    // Tensor cores where the kernel has a tensor-core form (half operands), else SIMT.
    let shapes = problem.shape_refs();
    let template = CudaSpace::new(kernel, extents, &shapes, &target)
        .map_err(|e| format!("building the GPU space: {e}"))?;

    // --- tune -----------------------------------------------------------------------
    let tuned = {
        let mut measurer = CudaMeasurer::with_space(kernel, &problem.shapes, template.clone())
            .map_err(|e| format!("preparing the measurer: {e}"))?;
        let mut log = TrialLog::new(
            w,
            problem,
            opts,
            template.space(),
            Target::cuda(&info.name, info.sm()),
            tensor_dsl::codegen::cuda::CODEGEN_VERSION,
        );
        let tuned = tune(problem, &template, &mut measurer, opts.settings, &mut |t| {
            log.trial(t)
        })?;
        log.finish();
        tuned
    };
    let best = tuned.report(r, template.space(), template.default_point().ok().as_ref())?;
    let ours_schedule = template.decode(&best)?;
    let default_schedule = template.default_schedule();

    // --- check and time side by side ----------------------------------------------
    let err = |e: tensor_dsl::Error| e.to_string();
    let ours = cuda::compile_schedule(kernel, extents, &shapes, &ours_schedule).map_err(err)?;
    let default =
        cuda::compile_schedule(kernel, extents, &shapes, &default_schedule).map_err(err)?;
    let data =
        tensor_dsl::measure::random_inputs(&problem.kernel, &problem.shapes, opts.settings.seed);
    let inputs = kernel
        .inputs()
        .iter()
        .map(|&p| DeviceBuffer::from_host(&data[p]))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let refs: Vec<&DeviceBuffer> = inputs.iter().collect();
    let out_len: usize = problem.shapes[kernel.output].iter().product();
    let out_dtype = kernel.params[kernel.output].dtype;
    let base_dtype = baseline::output_dtype(&w.op, operand_dtype(problem)?);
    let mut ours_out = DeviceBuffer::zeros_of(out_dtype, out_len).map_err(err)?;
    let mut base_out = DeviceBuffer::zeros_of(base_dtype, out_len).map_err(err)?;
    let mut default_out = DeviceBuffer::zeros_of(out_dtype, out_len).map_err(err)?;
    let mut base = match (baseline::Baseline::new(&w.op, &refs, &mut base_out), &w.op) {
        (Ok(base), _) => base,
        // A stage kernel cuDNN has no call for (layer norm): ours and the default are still
        // checked (against the naive loops on the host) and timed, without a library column.
        (Err(why), Op::Stage(stage)) => {
            r.baseline = format!("none ({why})");
            ours.launch(&refs, &mut ours_out).map_err(err)?;
            default.launch(&refs, &mut default_out).map_err(err)?;
            let host: Vec<Vec<f32>> = kernel.inputs().iter().map(|&p| data[p].to_f32()).collect();
            let host: Vec<&[f32]> = host.iter().map(Vec::as_slice).collect();
            let mut want = vec![0.0f32; out_len];
            crate::stages::naive(stage, &host, &mut want)?;
            let tol = baseline::tolerance(out_dtype);
            for (what, out) in [("our", &ours_out), ("the default schedule's", &default_out)] {
                let got = out.to_host().map_err(err)?;
                let (mismatch, max_diff) = compare_within(&got, &want, tol);
                if let Some(m) = mismatch {
                    return Err(format!("{what} output differs from the naive loops': {m}"));
                }
                if what == "our" {
                    r.max_abs_diff = Some(max_diff).filter(|d| d.is_finite());
                }
            }
            let (timings, how) = side_by_side(
                vec![
                    Box::new(|| ours.launch(&refs, &mut ours_out).map_err(err)),
                    Box::new(|| default.launch(&refs, &mut default_out).map_err(err)),
                ],
                opts.plan.rounds,
                opts.plan.round_seconds,
            )?;
            r.timing = Some(format!("ours / default: {how}"));
            return r.timed_alone(&timings, "cuBLAS/cuDNN", why);
        }
        (Err(e), _) => return Err(e),
    };
    r.baseline = base.description.clone();
    ours.launch(&refs, &mut ours_out).map_err(err)?;
    default.launch(&refs, &mut default_out).map_err(err)?;
    base.enqueue(&refs, &mut base_out)?;
    let (ours_host, base_host, default_host) = (
        ours_out.to_host().map_err(err)?,
        base_out.to_host().map_err(err)?,
        default_out.to_host().map_err(err)?,
    );
    // The looser of the two outputs' roundings.
    let tol = baseline::tolerance(base_dtype).max(baseline::tolerance(out_dtype));
    let (mismatch, max_diff) = compare_within(&ours_host, &base_host, tol);
    r.max_abs_diff = Some(max_diff).filter(|d| d.is_finite());
    if let Some(m) = mismatch {
        return Err(format!("our output differs from the baseline's: {m}"));
    }
    if let (Some(m), _) = compare_within(&default_host, &base_host, tol) {
        return Err(format!(
            "the default schedule's output differs from the baseline's: {m}"
        ));
    }
    let (timings, how) = {
        let contenders: Vec<Enqueue<'_>> = vec![
            Box::new(|| ours.launch(&refs, &mut ours_out).map_err(err)),
            Box::new(|| base.enqueue(&refs, &mut base_out)),
            Box::new(|| default.launch(&refs, &mut default_out).map_err(err)),
        ];
        side_by_side(contenders, opts.plan.rounds, opts.plan.round_seconds)?
    };
    r.timing = Some(format!("ours / baseline / default: {how}"));
    r.timed(&timings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensor_dsl::template::gpu::GpuTarget;

    /// With `--dtypes bf16` every GEMM-shaped workload (matmuls, batched matmuls, the
    /// fused-epilogue GEMMs, convolutions) is tuned in the tensor-core space on an H100, and
    /// the baseline reads the same operand type.
    #[test]
    fn half_workloads_take_the_tensor_core_space() {
        let suites = crate::workloads::load(crate::workloads::WORKLOADS_JSON).unwrap();
        let h100 = GpuTarget::h100();
        for suite in [
            "bert_matmul",
            "opevo_batch_matmul",
            "bolt_epilogue",
            "resnet50_conv2d",
        ] {
            let (_, list) = suites.iter().find(|(n, _)| n == suite).unwrap();
            for w in list {
                let p = w.problem_with("bf16").unwrap();
                assert_eq!(operand_dtype(&p), Ok(tensor_dsl::ir::DType::BF16));
                let space = CudaSpace::new(&p.kernel, &p.extents, &p.shape_refs(), &h100)
                    .unwrap_or_else(|e| panic!("{}: {e}", w.name));
                assert_eq!(space.name(), "tensor_core", "{}", w.name);
                let f32_problem = w.problem().unwrap();
                let space = CudaSpace::new(
                    &f32_problem.kernel,
                    &f32_problem.extents,
                    &f32_problem.shape_refs(),
                    &h100,
                )
                .unwrap();
                assert_eq!(space.name(), "simt", "{}", w.name);
            }
        }
    }
}

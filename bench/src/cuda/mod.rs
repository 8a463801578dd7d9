//! One kernel on the GPU: tune the GPU template with [`CudaMeasurer`], then check and time
//! our best schedule, the cuBLAS/cuDNN baseline and the untuned default side by side on the
//! same stream and buffers.
//!
//! Timing: every contender is queued back to back between two CUDA events for about
//! `--round-seconds` (at least once), giving its mean seconds per call for that round;
//! rounds alternate between the contenders (ours, baseline, default, ours, ...), and each
//! reports the median of its rounds. Launch latency is hidden by the back-to-back queueing,
//! as it would be in an application.

mod baseline;
mod gemm_plan;

use tensor_dsl::autotune::combined_features;
use tensor_dsl::features::{gpu_features, GpuFeatures};
use tensor_dsl::measure::cuda::CudaMeasurer;
use tensor_dsl::records::Target;
use tensor_dsl::runtime::cuda::{self, DeviceBuffer};
use tensor_dsl::template::gpu::GpuTemplate;
use tuner::Trial;

use crate::report::KernelResult;
use crate::run::{compare, Options};
use crate::timing::{median, Timing};
use crate::tuning::{search, Bounded, Settings, TrialLog, Tuned};
use crate::workloads::{Problem, Workload};

pub use baseline::name as baseline_name;

/// What the report says about the GPU (name, index, architecture, SMs, memory, driver).
pub fn describe_gpu() -> Result<String, String> {
    cuda::available().map(|info| info.to_string())
}

/// Tunes and times one workload on the GPU; every failure lands in the result.
pub fn run(w: &Workload, problem: &Problem, opts: &Options<'_>) -> KernelResult {
    let mut r = KernelResult::empty(&w.suite, &w.name, w.shape.clone(), baseline::name(&w.op));
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
    template: &GpuTemplate,
    measurer: &mut CudaMeasurer,
    settings: &Settings,
    on_trial: &mut dyn FnMut(&Trial),
) -> Result<Tuned, String> {
    let target = measurer.target().clone();
    let features = combined_features(template.space(), GpuFeatures::NAMES.len(), |c| {
        let s = template.decode(c).ok()?;
        Some(
            gpu_features(
                &problem.kernel,
                &problem.extents,
                &problem.shapes,
                &s,
                &target,
                None,
            )
            .to_vec(),
        )
    });
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
        settings.default_point(template.default_config()?),
        &tensor_dsl::transfer::Prior::default(),
        settings,
        &features,
        &mut bounded,
        on_trial,
    )
}

/// A contender: queues one call on the runtime's stream.
type Enqueue<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;

/// Times the contenders in alternating rounds (see the module docs).
fn side_by_side(
    contenders: &mut [Enqueue<'_>],
    rounds: usize,
    round_seconds: f64,
) -> Result<Vec<Timing>, String> {
    let time = |f: &mut Enqueue<'_>, launches: usize| {
        cuda::time_enqueued(launches, &mut || {
            f().map_err(|message| tensor_dsl::Error::Backend {
                kernel: "bench".into(),
                message,
            })
        })
        .map_err(|e| e.to_string())
    };
    let mut launches = Vec::with_capacity(contenders.len());
    for f in contenders.iter_mut() {
        time(f, 3)?; // warm-up
        let once = time(f, 3)?;
        let n = (round_seconds / once.max(1e-9)).ceil();
        launches.push(n.clamp(1.0, 100_000.0) as usize);
    }
    let mut per_round = vec![Vec::with_capacity(rounds); contenders.len()];
    for _ in 0..rounds.max(1) {
        for (i, f) in contenders.iter_mut().enumerate() {
            per_round[i].push(time(f, launches[i])?);
        }
    }
    Ok(per_round
        .into_iter()
        .map(|r| Timing {
            median: median(&r),
            rounds: r,
        })
        .collect())
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
    let template = GpuTemplate::new(kernel, extents, &target)
        .map_err(|e| format!("building the GPU space: {e}"))?;

    // --- tune -----------------------------------------------------------------------
    let tuned = {
        let mut measurer = CudaMeasurer::new(kernel, &problem.shapes, template.clone())
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
    let best = tuned.report(r, template.space(), template.default_config().ok().as_ref())?;
    let ours_schedule = template.decode(&best)?;
    let default_schedule = template.default_schedule();

    // --- check and time side by side ----------------------------------------------
    let shapes = problem.shape_refs();
    let err = |e: tensor_dsl::Error| e.to_string();
    let ours = cuda::compile(kernel, extents, &shapes, &ours_schedule).map_err(err)?;
    let default = cuda::compile(kernel, extents, &shapes, &default_schedule).map_err(err)?;
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
    let mut ours_out = DeviceBuffer::zeros(out_len).map_err(err)?;
    let mut base_out = DeviceBuffer::zeros(out_len).map_err(err)?;
    let mut default_out = DeviceBuffer::zeros(out_len).map_err(err)?;
    let mut base = baseline::Baseline::new(&w.op, &refs, &mut base_out)?;
    r.baseline = base.description.clone();
    ours.launch(&refs, &mut ours_out).map_err(err)?;
    default.launch(&refs, &mut default_out).map_err(err)?;
    base.enqueue(&refs, &mut base_out)?;
    let (ours_host, base_host, default_host) = (
        ours_out.to_host().map_err(err)?,
        base_out.to_host().map_err(err)?,
        default_out.to_host().map_err(err)?,
    );
    let (mismatch, max_diff) = compare(&ours_host, &base_host);
    r.max_abs_diff = Some(max_diff).filter(|d| d.is_finite());
    if let Some(m) = mismatch {
        return Err(format!("our output differs from the baseline's: {m}"));
    }
    if let (Some(m), _) = compare(&default_host, &base_host) {
        return Err(format!(
            "the default schedule's output differs from the baseline's: {m}"
        ));
    }
    let timings = {
        let mut contenders: Vec<Enqueue<'_>> = vec![
            Box::new(|| ours.launch(&refs, &mut ours_out).map_err(err)),
            Box::new(|| base.enqueue(&refs, &mut base_out)),
            Box::new(|| default.launch(&refs, &mut default_out).map_err(err)),
        ];
        side_by_side(&mut contenders, opts.plan.rounds, opts.plan.round_seconds)?
    };
    r.timed(&timings)
}

//! The GPU measurer (`tensor_dsl::measure::cuda`) and its child processes
//! (`tensor_dsl::measure::cuda_child`).
//!
//! Without a GPU: the batch compiler runs through the real NVRTC for an H100 target (valid
//! points compile to CUBINs, points that do not fit the space are refused with a reason, the
//! batch keeps its order, and each compiled point's ptxas register count reaches the
//! analytic features); `CudaMeasurer::new` says the device is unavailable; the child
//! protocol runs against a fake child (this test binary re-run): a candidate that crashes
//! its child, hangs past the timeout or loses the CUDA context is invalid and the next one
//! runs in a fresh child; and this test binary, re-run with `TENSOR_DSL_CUDA_CHILD=1`, serves
//! as the real child before `main` (without a GPU it answers that the GPU is unavailable,
//! with the parent's reason). Without NVRTC the compile check prints why and passes, unless
//! `TENSOR_DSL_REQUIRE_NVRTC=1` (CI).
//!
//! With a GPU (they fail instead of skipping with `TENSOR_DSL_REQUIRE_GPU=1`): the default
//! and random points of a matmul and a convolution are measured in child processes; each
//! valid outcome has positive timings, and a point whose launch is too slow for
//! `max_seconds` is invalid with "too slow"; a hand-written kernel that writes to an
//! illegal address is invalid, its child ends, and the next candidate is measured in a
//! fresh one.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{rngs::StdRng, SeedableRng};
use std::path::PathBuf;
use std::time::Duration;
use tensor_dsl::ir::{bind, parse_text, Kernel};
use tensor_dsl::measure::cuda::{compile_batch, CudaMeasurer};
use tensor_dsl::measure::cuda_child::{
    serve, Candidate, ChildCommand, ChildOutcome, Executor, Failure, Measured, Supervisor, Task,
    WireImage, CHILD_ENV,
};
use tensor_dsl::runtime::cuda::DeviceBuffer;
use tensor_dsl::runtime::{cubin, cuda, nvrtc};
use tensor_dsl::template::cuda::CudaSpace;
use tensor_dsl::template::gpu::{GpuTarget, GpuTemplate};
use tensor_dsl::testing::{gpu_info, runs, Need};
use tensor_dsl::Error;
use tuner::{Config, Measurer, Outcome};

fn problem(src: &str, shapes: &[&[usize]]) -> (Kernel, Vec<Vec<usize>>, Vec<usize>) {
    let kernel = parse_text("k", src, None).unwrap();
    let extents = bind(&kernel, shapes).unwrap();
    (kernel, shapes.iter().map(|s| s.to_vec()).collect(), extents)
}

const MATMUL: &str = "c[[i, j]] += a[[i, k]] * b[[k, j]]";
const CONV: &str = "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]";

#[test]
fn a_batch_compiles_in_order_and_refuses_points_outside_the_space() {
    let missing = (!nvrtc::available()).then_some("NVRTC is not on the library path");
    if !runs(
        "a_batch_compiles_in_order_and_refuses_points_outside_the_space",
        Need::Compilers,
        missing,
    ) {
        return;
    }
    let target = GpuTarget::h100();
    let (kernel, shapes, extents) = problem(MATMUL, &[&[100, 70], &[70, 130], &[100, 130]]);
    let template = GpuTemplate::new(&kernel, &extents, &target).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut batch = vec![template.default_config().unwrap()];
    for _ in 0..5 {
        batch.push(template.space().sample_uniform(&mut rng).unwrap());
    }
    // A point of another shape's space does not decode here.
    let (other, _, other_extents) = problem(MATMUL, &[&[8, 8], &[8, 8], &[8, 8]]);
    let foreign = GpuTemplate::new(&other, &other_extents, &target)
        .unwrap()
        .default_config()
        .unwrap();
    batch.insert(2, foreign);
    // Nor does a point with the wrong number of values.
    batch.push(Config::new(Vec::new()));
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let built = compile_batch(&kernel, &extents, &refs, &template, &target, &batch);
    assert_eq!(built.len(), batch.len());
    for (i, (config, result)) in batch.iter().zip(&built).enumerate() {
        match (i, result) {
            (2, Err(reason)) | (7, Err(reason)) => assert!(!reason.is_empty()),
            (2, Ok(_)) | (7, Ok(_)) => panic!("point {i} should not decode"),
            (_, Ok(schedule)) => {
                assert_eq!(template.decode(config).unwrap(), *schedule, "point {i}");
                // ptxas's register count reaches the analytic features.
                let key = cubin::schedule_key(
                    &kernel.fingerprint(),
                    &extents,
                    &format!("{schedule:?}"),
                    "sm_90",
                );
                let report = cubin::recall(&key).expect("the compile's report is remembered");
                assert!(report.registers > 0);
                let space = CudaSpace::Simt(template.clone());
                let features = tensor_dsl::transfer::cuda_features(
                    &kernel, &extents, &shapes, &space, &target,
                );
                let analytic = tensor_dsl::features::gpu_features(
                    &kernel,
                    &extents,
                    &shapes,
                    schedule,
                    &target,
                    Some(&report),
                );
                assert_eq!(analytic.registers, f64::from(report.registers));
                assert!(features(config).ends_with(&analytic.to_vec()), "point {i}");
            }
            (_, Err(reason)) => panic!(
                "point {i} ({}) should compile: {reason}",
                template.space().format(config).unwrap()
            ),
        }
    }
}

#[test]
fn without_a_gpu_the_measurer_is_unavailable() {
    let Err(reason) = cuda::available() else {
        println!("a GPU is present; this check does not apply");
        return;
    };
    let (kernel, shapes, extents) = problem(MATMUL, &[&[16, 16], &[16, 16], &[16, 16]]);
    let template = GpuTemplate::new(&kernel, &extents, &GpuTarget::h100()).unwrap();
    match CudaMeasurer::new(&kernel, &shapes, template) {
        Err(Error::DeviceUnavailable { device, reason: r }) => {
            assert_eq!(device, "cuda");
            assert_eq!(r, reason);
        }
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
}

#[test]
fn on_a_gpu_points_are_checked_and_timed() {
    let Some(gpu) = gpu_info("on_a_gpu_points_are_checked_and_timed") else {
        return;
    };
    let target = gpu.target();
    for (src, shapes) in [
        (MATMUL, vec![vec![257, 300], vec![300, 129], vec![257, 129]]),
        (
            CONV,
            vec![vec![2, 16, 15, 15], vec![24, 16, 3, 3], vec![2, 24, 8, 8]],
        ),
    ] {
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let (kernel, shapes, extents) = problem(src, &refs);
        let template = GpuTemplate::new(&kernel, &extents, &target).unwrap();
        let mut m = CudaMeasurer::new(&kernel, &shapes, template.clone()).unwrap();
        assert!(m.isolated(), "candidates run in a child process");
        let mut rng = StdRng::seed_from_u64(3);
        let mut batch = vec![template.default_config().unwrap()];
        for _ in 0..7 {
            batch.push(template.space().sample_uniform(&mut rng).unwrap());
        }
        let outcomes = m.measure(&batch);
        assert_eq!(outcomes.len(), batch.len());
        assert!(outcomes[0].is_valid(), "default: {:?}", outcomes[0]);
        for (c, o) in batch.iter().zip(&outcomes) {
            let text = template.space().format(c).unwrap();
            match o {
                Outcome::Valid { samples } => {
                    assert!(!samples.is_empty() && samples.iter().all(|&s| s > 0.0));
                }
                // Random points may exceed a limit only ptxas/the driver knows (registers);
                // they must never compute a wrong result.
                Outcome::Invalid { reason } => {
                    assert!(!reason.contains("wrong result"), "{text}: {reason}");
                    println!("{text}: invalid: {reason}");
                }
            }
        }
        m.max_seconds = 0.0;
        match &m.measure(&batch[..1])[0] {
            Outcome::Invalid { reason } => assert!(reason.contains("too slow"), "{reason}"),
            other => panic!("expected too slow, got {other:?}"),
        }
    }
}

/// On a GPU, a call's schedule comes from an embedded record for this GPU when there is one,
/// else the default (first-call tuning is off unless asked for).
#[test]
fn on_a_gpu_dispatch_uses_an_embedded_record() {
    use tensor_dsl::dispatch::cuda_decision;
    use tensor_dsl::records::{Record, Target, RECORD_VERSION};
    use tensor_dsl::tuned::{register_embedded, Source};

    let Some(gpu) = gpu_info("on_a_gpu_dispatch_uses_an_embedded_record") else {
        return;
    };
    let shapes: Vec<Vec<usize>> = vec![vec![200, 72], vec![72, 136], vec![200, 136]];
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let (kernel, shapes, extents) = problem(MATMUL, &refs);
    let template = GpuTemplate::new(&kernel, &extents, &gpu.target()).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let config = template.space().sample_uniform(&mut rng).unwrap();
    let record = Record {
        version: RECORD_VERSION,
        kernel: kernel.fingerprint(),
        name: kernel.name.clone(),
        kernel_text: kernel.to_string(),
        shapes: shapes.clone(),
        dtype: "f32".into(),
        target: Target::cuda(&gpu.name, gpu.sm()),
        codegen: tensor_dsl::codegen::cuda::CODEGEN_VERSION,
        config: template.space().format(&config).unwrap(),
        seconds: Some(1e-6),
        samples: vec![1e-6],
        error: None,
        gflops: None,
        strategy: "test".into(),
        unix_time: 0,
        pair: None,
    };
    let line = serde_json::to_string(&record).unwrap() + "\n";
    register_embedded(Box::leak(line.into_boxed_str()));
    let (inputs, mut out) = device_args(&kernel, &shapes);
    let input_refs: Vec<&DeviceBuffer> = inputs.iter().collect();
    let d = cuda_decision(&kernel, &extents, &refs, &input_refs, &mut out).unwrap();
    assert_eq!(d.source, Source::Embedded);
    assert_eq!(d.schedule, template.decode(&config).unwrap().into());
    // Another shape has no record of its own: the nearest shape's schedule if it is valid
    // there and measured no slower, else the default.
    let other_shapes = vec![vec![64, 72], vec![72, 136], vec![64, 136]];
    let other: Vec<&[usize]> = other_shapes.iter().map(Vec::as_slice).collect();
    let other_extents = bind(&kernel, &other).unwrap();
    let (other_inputs, mut other_out) = device_args(&kernel, &other_shapes);
    let other_refs: Vec<&DeviceBuffer> = other_inputs.iter().collect();
    if std::env::var("TENSOR_DSL_TUNE").is_err() {
        let d =
            cuda_decision(&kernel, &other_extents, &other, &other_refs, &mut other_out).unwrap();
        assert!(
            matches!(d.source, Source::Default | Source::Nearest),
            "{:?}",
            d.source
        );
    }
}

/// Random inputs (declaration order) and a zero output on the GPU.
fn device_args(kernel: &Kernel, shapes: &[Vec<usize>]) -> (Vec<DeviceBuffer>, DeviceBuffer) {
    let data = tensor_dsl::measure::random_inputs(kernel, shapes, 1);
    let inputs = kernel
        .inputs()
        .iter()
        .map(|&p| DeviceBuffer::from_host(&data[p]).unwrap())
        .collect();
    let out = DeviceBuffer::zeros(shapes[kernel.output].iter().product()).unwrap();
    (inputs, out)
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

/// Set in the fake child (this test binary re-run with only `fake_child`).
const FAKE: &str = "TENSOR_DSL_TEST_FAKE_CHILD";

/// Answers from the candidate's entry name: crashes, hangs, loses the context, is wrong, or
/// measures `id` microseconds.
struct Fake;

impl Executor for Fake {
    fn prepare(&mut self, _task: &Task) -> Result<String, String> {
        Ok(format!("fake GPU in process {}", std::process::id()))
    }

    fn run(&mut self, c: &Candidate) -> Result<Measured, Failure> {
        match c.entry.as_str() {
            "crash" => {
                eprintln!("the fake child aborts");
                std::process::abort()
            }
            "hang" => {
                std::thread::sleep(Duration::from_secs(600));
                Err(Failure {
                    reason: "woke up".into(),
                    context_lost: false,
                })
            }
            "fault" => Err(Failure {
                reason: "CUDA_ERROR_ILLEGAL_ADDRESS (fake)".into(),
                context_lost: true,
            }),
            "wrong" => Err(Failure {
                reason: "wrong result: element 3 is 0, expected 1".into(),
                context_lost: false,
            }),
            _ => Ok(Measured {
                samples: vec![c.id as f64 * 1e-6],
                launches: 10,
                method: "graph".into(),
                note: None,
            }),
        }
    }
}

/// Runs only as the fake child: serves the protocol with [`Fake`] and exits.
#[test]
fn fake_child() {
    if std::env::var_os(FAKE).is_none() {
        return;
    }
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    let code = serve(&mut Fake, &mut stdin.lock(), &mut stdout.lock());
    std::process::exit(code);
}

fn copy_task(expected: PathBuf) -> Task {
    Task {
        kernel: parse_text("copy", "o[[i]] = a[[i]]", None).unwrap(),
        shapes: vec![vec![32], vec![32]],
        seed: 5,
        expected,
        tolerance: 1e-3,
        reference_source: "the inputs".into(),
    }
}

fn candidate(id: u64, entry: &str, source: &str, image: WireImage) -> Candidate {
    Candidate {
        id,
        source: source.into(),
        entry: entry.into(),
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
        tensor_maps: Vec::new(),
        image,
        schedule: "(hand-written)".into(),
        warmup: 1,
        repeats: 3,
        max_seconds: 0.01,
    }
}

fn no_image() -> WireImage {
    WireImage::Ptx {
        arch: "compute_90".into(),
        text: String::new(),
        reason: "a fake".into(),
    }
}

#[test]
fn a_crashing_hanging_or_faulting_candidate_is_invalid_and_the_next_runs_in_a_fresh_child() {
    if std::env::var_os(FAKE).is_some() {
        return;
    }
    let command = ChildCommand {
        program: std::env::current_exe().unwrap(),
        args: ["--exact", "fake_child", "--nocapture", "--test-threads=1"]
            .iter()
            .map(Into::into)
            .collect(),
        env: vec![(FAKE.into(), "1".into())],
    };
    let mut s = Supervisor::new(command, copy_task(PathBuf::from("/nonexistent")));
    s.timeout = Duration::from_secs(2);
    let script = [
        "ok", "crash", "ok", "hang", "ok", "fault", "ok", "wrong", "ok",
    ];
    let mut outcomes = Vec::new();
    for (n, entry) in script.iter().enumerate() {
        outcomes.push(s.run(&candidate(n as u64 + 1, entry, "", no_image())));
    }
    for (n, (entry, o)) in script.iter().zip(&outcomes).enumerate() {
        println!("{entry}: {o:?}");
        match (*entry, o) {
            ("ok", ChildOutcome::Measured(m)) => {
                let want = (n + 1) as f64 * 1e-6;
                assert!(
                    m.samples.len() == 1 && (m.samples[0] - want).abs() < 1e-15,
                    "answers match requests: {m:?}"
                )
            }
            ("crash", ChildOutcome::Invalid(r)) => {
                assert!(r.contains("crashed") && r.contains("signal"), "{r}");
                assert!(r.contains("the fake child aborts"), "stderr is kept: {r}");
            }
            ("hang", ChildOutcome::Invalid(r)) => assert!(r.contains("timed out"), "{r}"),
            ("fault", ChildOutcome::Invalid(r)) => {
                assert!(r.contains("ILLEGAL_ADDRESS") && r.contains("lost"), "{r}")
            }
            ("wrong", ChildOutcome::Invalid(r)) => assert!(r.contains("wrong result"), "{r}"),
            _ => panic!("{entry}: {o:?}"),
        }
    }
    // The first child, then one after the crash, the hang and the fault; not after "wrong".
    assert_eq!(s.children_started(), 4);
    assert!(s.device().unwrap().starts_with("fake GPU"));
}

#[test]
fn this_test_binary_serves_as_the_real_child_before_main() {
    // Were the constructor not to intercept, the child would run this binary's tests.
    assert!(
        std::env::var_os(CHILD_ENV).is_none(),
        "the measuring child ran the test harness: the constructor did not intercept"
    );
    if std::env::var_os(FAKE).is_some() {
        return;
    }
    let command = ChildCommand::current_exe().expect("the constructor ran in this test binary");
    let mut s = Supervisor::new(command, copy_task(PathBuf::from("/nonexistent")));
    match cuda::available() {
        Err(reason) => {
            let o = s.run(&candidate(1, "td_kernel", "", no_image()));
            assert_eq!(o, ChildOutcome::Unavailable(reason.clone()));
            assert_eq!(s.children_started(), 1);
            println!("the child says, as the parent: {reason}");
        }
        Ok(_) => println!("a GPU is present: on_a_gpu_a_faulting_candidate_... covers the child"),
    }
}

#[test]
fn on_a_gpu_a_faulting_candidate_is_invalid_and_tuning_goes_on() {
    if std::env::var_os(FAKE).is_some() {
        return;
    }
    let Some(gpu) = gpu_info("on_a_gpu_a_faulting_candidate_is_invalid_and_tuning_goes_on") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("td-child-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let expected = dir.join("expected.f32");
    let task = copy_task(expected.clone());
    // A copy kernel: its output is its input.
    let a = tensor_dsl::measure::random_inputs(&task.kernel, &task.shapes, task.seed)
        .swap_remove(0)
        .to_f32();
    let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&expected, bytes).unwrap();
    let good = r#"extern "C" __global__ void td_kernel(const float *__restrict__ a, float *__restrict__ o) {
    o[threadIdx.x] = a[threadIdx.x];
}
"#;
    let bad = r#"extern "C" __global__ void td_kernel(const float *__restrict__ a, float *__restrict__ o) {
    o[threadIdx.x + (1ll << 40)] = a[threadIdx.x];
}
"#;
    let image = |src: &str| {
        let (image, _) = nvrtc::image("copy", src, "td_kernel", &gpu.target()).unwrap();
        WireImage::from(&image)
    };
    let mut s = Supervisor::new(ChildCommand::current_exe().unwrap(), task);
    let c = |id, src: &str| {
        let mut c = candidate(id, "td_kernel", src, image(src));
        c.max_seconds = 1.0;
        c
    };
    let first = s.run(&c(1, good));
    let fault = s.run(&c(2, bad));
    let after = s.run(&c(3, good));
    println!("good: {first:?}\nfault: {fault:?}\nafter: {after:?}");
    assert!(
        matches!(&first, ChildOutcome::Measured(m) if !m.samples.is_empty() && m.method == "graph"),
        "{first:?}"
    );
    match &fault {
        ChildOutcome::Invalid(r) => assert!(
            r.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && r.contains("fresh"),
            "{r}"
        ),
        other => panic!("expected an invalid candidate, got {other:?}"),
    }
    assert!(matches!(&after, ChildOutcome::Measured(_)), "{after:?}");
    assert_eq!(s.children_started(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

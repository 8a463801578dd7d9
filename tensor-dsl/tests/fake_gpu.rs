//! The CUDA runtime, its CUDA-graph timer and the measuring child, end to end on a fake GPU:
//! a fake `libcuda.so` (`tests/fake_gpu/libcuda.c`: host memory, a virtual clock, kernels run
//! by name) with the real NVRTC, in a child process of this test (`LD_LIBRARY_PATH` is read
//! at start-up). What no GPU has run yet still runs here, as far as a fake can take it:
//!
//! - what the driver gets is the CUBIN NVRTC assembled for sm_90; a driver that refuses it
//!   gets PTX instead, and the image says why;
//! - a copy kernel launched through `DeviceBuffer`s copies (arguments reach the kernel);
//! - `CompiledKernel::timing` captures a CUDA graph of N launches and times exactly the
//!   fake's 5 µs per launch, N chosen for 200 µs samples; where capture is refused, a spin
//!   kernel leads each sample and the time is still 5 µs;
//! - the measuring child (this test binary re-run, served before `main`) measures a good
//!   candidate, answers a faulting one as invalid with the context lost, and the next
//!   candidate runs in a fresh child; `CudaMeasurer` runs generated candidates through it
//!   (the fake does not compute them: they are wrong, which is the point of the check);
//! - a fault in process makes the context lost and sticky.
//!
//! Skips (prints why) without a C compiler or NVRTC, unless `TENSOR_DSL_REQUIRE_NVRTC=1` or
//! `TENSOR_DSL_REQUIRE_GPU=1`.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use tensor_dsl::codegen::cuda::CudaSource;
use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::measure::cuda::CudaMeasurer;
use tensor_dsl::measure::cuda_child::{
    Candidate, ChildCommand, ChildOutcome, Supervisor, Task, WireImage,
};
use tensor_dsl::runtime::cubin::Image;
use tensor_dsl::runtime::cuda::{self, DeviceBuffer};
use tensor_dsl::runtime::graph_timing::{Method, TimingPlan};
use tensor_dsl::runtime::nvrtc;
use tensor_dsl::template::gpu::GpuTemplate;
use tensor_dsl::testing::{runs, Need};
use tuner::{Measurer, Outcome};

const CHILD: &str = "TENSOR_DSL_TEST_FAKE_GPU";

/// The folder holding `libnvrtc.so.13`: `$TENSOR_DSL_TEST_NVRTC_DIR`, the CI wheel folder, or
/// a folder on `LD_LIBRARY_PATH`.
fn nvrtc_dir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("TENSOR_DSL_TEST_NVRTC_DIR") {
        candidates.push(d.into());
    }
    let wheel = ".ci-deps/py/nvidia/cu13/lib";
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(wheel));
    if let Some(p) = std::env::var_os("LD_LIBRARY_PATH") {
        candidates.extend(std::env::split_paths(&p));
    }
    candidates
        .into_iter()
        .find(|d| d.join("libnvrtc.so.13").exists() || d.join("libnvrtc.so.12").exists())
}

fn build_fake(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let src = dir.join("libcuda.c");
    std::fs::write(&src, include_str!("fake_gpu/libcuda.c")).map_err(|e| e.to_string())?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(&src)
        .output()
        .map_err(|e| format!("no C compiler ({cc}): {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    // cudarc also tries libcuda.so.1.
    let _ = std::os::unix::fs::symlink("libcuda.so", dir.join("libcuda.so.1"));
    Ok(dir.to_path_buf())
}

#[test]
fn the_runtime_timer_and_measuring_child_run_on_a_fake_gpu() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let base = std::env::temp_dir().join(format!("td-fake-gpu-{}", std::process::id()));
    let nvrtc = nvrtc_dir();
    let fake = build_fake(&base.join("lib"));
    let missing = match (&nvrtc, &fake) {
        (None, _) => Some("NVRTC (libnvrtc.so.13) not found".to_string()),
        (_, Err(e)) => Some(format!("the fake driver did not build: {e}")),
        _ => None,
    };
    if !runs(
        "the_runtime_timer_and_measuring_child_run_on_a_fake_gpu",
        Need::Compilers,
        missing.as_deref(),
    ) {
        return;
    }
    let (nvrtc, fake) = (nvrtc.unwrap(), fake.unwrap());
    let path = std::env::join_paths([fake, nvrtc]).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "on_the_fake_gpu",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", path)
        .env("FAKE_LOG", base.join("loads.txt"))
        .env("TENSOR_DSL_NO_DISK_CACHE", "1")
        .env_remove("TENSOR_DSL_DEVICE")
        .env_remove("TENSOR_DSL_CUDA_DEVICE")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "the fake-GPU run failed");
    assert!(stdout.contains("FAKE GPU DONE"), "the run did not finish");
    let loads = std::fs::read_to_string(base.join("loads.txt")).unwrap_or_default();
    assert!(loads.lines().any(|l| l == "cubin"), "{loads}");
    let _ = std::fs::remove_dir_all(&base);
}

fn copy_source(entry: &str) -> String {
    format!(
        r#"extern "C" __global__ void {entry}(const float *__restrict__ a, float *__restrict__ o) {{
    o[threadIdx.x] = a[threadIdx.x];
}}
"#
    )
}

fn copy_kernel(entry: &str) -> CudaSource {
    CudaSource {
        source: copy_source(entry),
        entry: entry.into(),
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
        tensor_maps: Vec::new(),
    }
}

/// Runs only in the child with the fake driver.
#[test]
fn on_the_fake_gpu() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let gpu = cuda::available().expect("the fake GPU is detected");
    assert_eq!((gpu.name.as_str(), gpu.sm()), ("Fake H100", 90));
    let kernel = parse_text("copy", "o[[i]] = a[[i]]", None).unwrap();
    let shapes: [&[usize]; 2] = [&[32], &[32]];

    // The driver gets the CUBIN (for the 9.0 device's own `sm_90a`), and the copy kernel
    // copies.
    let k = cuda::compile_source(&kernel, &shapes, copy_kernel("td_copy")).unwrap();
    assert!(
        matches!(k.image(), Image::Cubin { arch, .. } if arch == "sm_90a"),
        "{}",
        k.image().kind()
    );
    let data: Vec<f32> = (0..32).map(|i| i as f32 * 0.5).collect();
    let a = DeviceBuffer::from_host(&data).unwrap();
    let mut o = DeviceBuffer::zeros(32).unwrap();
    k.launch(&[&a], &mut o).unwrap();
    assert_eq!(o.to_host().unwrap(), data);
    println!("copy: ok ({})", k.describe());

    // A CUDA graph of N launches, timed at the fake's 5 µs per launch.
    let plan = TimingPlan::default();
    let t = k.timing(&[&a], &mut o, &plan, 4).unwrap();
    println!("graph timing: {t:?}");
    assert_eq!(t.method, Method::Graph);
    assert_eq!(t.launches, 40, "200 µs of 5 µs launches");
    assert_eq!(t.samples.len(), 4);
    for s in &t.samples {
        assert!((s - 5e-6).abs() < 1e-9, "{s}");
    }
    let samples = k.time(&[&a], &mut o, 2, 3).unwrap();
    assert_eq!(samples.len(), 3);

    // Capture refused: a spin kernel leads each sample, the time is still the kernel's.
    std::env::set_var("FAKE_NO_CAPTURE", "1");
    let t = k.timing(&[&a], &mut o, &plan, 3).unwrap();
    std::env::remove_var("FAKE_NO_CAPTURE");
    println!("spin timing: {t:?}");
    assert_eq!(t.method, Method::Spin);
    assert!(
        t.note.as_deref().unwrap().contains("no CUDA graph"),
        "{t:?}"
    );
    for s in &t.samples {
        assert!((s - 5e-6).abs() < 1e-9, "{s}");
    }

    // A driver that refuses the CUBIN gets PTX, and the image says why.
    std::env::set_var("FAKE_REFUSE_CUBIN", "1");
    let p = cuda::compile_source(&kernel, &shapes, copy_kernel("td_copy")).unwrap();
    std::env::remove_var("FAKE_REFUSE_CUBIN");
    match p.image() {
        Image::Ptx { arch, reason, .. } => {
            assert_eq!(arch, "compute_90");
            assert!(
                reason.contains("refused") && reason.contains("NO_BINARY_FOR_GPU"),
                "{reason}"
            );
        }
        other => panic!("expected PTX, got {}", other.kind()),
    }
    p.launch(&[&a], &mut o).unwrap();
    assert_eq!(o.to_host().unwrap(), data);
    println!("PTX fallback: ok");

    // The measuring child: good, faulting, good again.
    let dir = std::env::temp_dir().join(format!("td-fake-child-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let task = Task {
        kernel: kernel.clone(),
        shapes: vec![vec![32], vec![32]],
        seed: 3,
        expected: dir.join("expected.f32"),
        tolerance: 1e-3,
        reference_source: "the inputs".into(),
    };
    let input = tensor_dsl::measure::random_inputs(&task.kernel, &task.shapes, task.seed)
        .swap_remove(0)
        .to_f32();
    let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&task.expected, bytes).unwrap();
    let candidate = |id: u64, entry: &str| {
        let g = copy_kernel(entry);
        let (image, _) = nvrtc::image(
            "copy",
            &g.source,
            entry,
            &tensor_dsl::template::gpu::GpuTarget::h100(),
        )
        .unwrap();
        Candidate {
            id,
            source: g.source,
            entry: g.entry,
            grid: g.grid,
            block: g.block,
            shared_bytes: 0,
            tensor_maps: Vec::new(),
            image: WireImage::from(&image),
            schedule: "(hand-written)".into(),
            warmup: 2,
            repeats: 3,
            max_seconds: 1.0,
        }
    };
    let mut s = Supervisor::new(ChildCommand::current_exe().unwrap(), task);
    let outcomes: Vec<ChildOutcome> = [(1, "td_copy"), (2, "td_fault"), (3, "td_copy")]
        .iter()
        .map(|&(id, entry)| s.run(&candidate(id, entry)))
        .collect();
    println!("child outcomes: {outcomes:#?}");
    for n in [0, 2] {
        match &outcomes[n] {
            ChildOutcome::Measured(m) => {
                assert_eq!(m.method, "graph");
                assert!(m.samples.iter().all(|s| (s - 5e-6).abs() < 1e-9), "{m:?}");
            }
            other => panic!("candidate {}: {other:?}", n + 1),
        }
    }
    match &outcomes[1] {
        ChildOutcome::Invalid(r) => assert!(
            r.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && r.contains("fresh child"),
            "{r}"
        ),
        other => panic!("the faulting candidate: {other:?}"),
    }
    assert_eq!(s.children_started(), 2);
    assert_eq!(s.device().map(|d| d.starts_with("Fake H100")), Some(true));
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);

    // The measurer runs generated candidates in a child: the fake does not compute them, so
    // the output check says they are wrong.
    let mm = parse_text("mm", "c[[i, j]] += a[[i, k]] * b[[k, j]]", None).unwrap();
    let mm_shapes = vec![vec![24, 16], vec![16, 40], vec![24, 40]];
    let refs: Vec<&[usize]> = mm_shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(&mm, &refs).unwrap();
    let template = GpuTemplate::new(&mm, &extents, &gpu.target()).unwrap();
    let mut m = CudaMeasurer::new(&mm, &mm_shapes, template.clone()).unwrap();
    assert!(m.isolated());
    let outcome = m.measure(&[template.default_config().unwrap()]).remove(0);
    println!("generated candidate on the fake: {outcome:?}");
    assert!(
        matches!(&outcome, Outcome::Invalid { reason } if reason.contains("wrong result")),
        "{outcome:?}"
    );
    drop(m);

    // A fault in process: reported at the next synchronization, sticky afterwards.
    let f = cuda::compile_source(&kernel, &shapes, copy_kernel("td_fault")).unwrap();
    f.launch(&[&a], &mut o).unwrap();
    let e = cuda::synchronize().unwrap_err().to_string();
    assert!(
        e.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && e.contains("sticky"),
        "{e}"
    );
    assert!(cuda::lost().is_some());
    let again = DeviceBuffer::zeros(4).unwrap_err().to_string();
    assert!(again.contains("lost"), "{again}");
    println!("FAKE GPU DONE");
}

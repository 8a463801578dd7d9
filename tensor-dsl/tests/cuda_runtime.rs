//! The CUDA runtime.
//!
//! Without a GPU: detection says why (never panics), `Device::Cuda` calls and every
//! `runtime::cuda` entry point return `DeviceUnavailable`, and detection is exercised against
//! fake driver libraries in child processes (cuInit failing, an old driver, no device, a
//! missing symbol, a bad `TENSOR_DSL_CUDA_DEVICE`, NVRTC present but no driver).
//!
//! With a GPU: kernels (matmul on awkward shapes, convolution with an epilogue, dot product,
//! the property-test kernel list on random awkward shapes) run through host tensors, through
//! `DeviceBuffer`/`CompiledKernel`, and through `#[tensor_kernel]` dispatch, compared with the
//! reference interpreter. Failures print the kernel, shapes, launch configuration, schedule
//! and the path of the saved CUDA source (`$TENSOR_DSL_TEST_ARTIFACTS`, default
//! `$TMPDIR/tensor-dsl-cuda-test`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Built without the `cuda` feature, `Device::Cuda` still exists and says why it cannot run.
#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_cuda_feature_cuda_is_unavailable() {
    use tensor_dsl::{tensor_kernel, Device, Error, Options, Tensor};

    #[tensor_kernel]
    fn scale(a: &Tensor<f32>, c: &mut Tensor<f32>) {
        c[[i]] = a[[i]] * 2.0;
    }

    let reason = Device::Cuda.availability().unwrap_err();
    assert!(reason.contains("`cuda` feature"), "{reason}");
    println!("skipping GPU checks: {reason}");
    let a = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap();
    let mut c = Tensor::zeros(&[2]);
    match scale::with(&Options::new().device(Device::Cuda))(&a, &mut c) {
        Err(Error::DeviceUnavailable { device, reason: r }) => {
            assert_eq!(device, "cuda");
            assert_eq!(r, reason);
        }
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
    if std::env::var("TENSOR_DSL_DEVICE").map_or(true, |v| v.trim().is_empty()) {
        assert_eq!(Options::new().resolve_device().unwrap(), Device::Cpu);
        scale(&a, &mut c).unwrap();
        assert_eq!(c.as_slice(), &[2.0, 4.0]);
    }
}

#[cfg(feature = "cuda")]
mod common;

#[cfg(feature = "cuda")]
mod with_cuda {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Arc;
    use tensor_dsl::codegen::cuda::CudaSource;
    use tensor_dsl::ir::{bind, parse_text, Kernel};
    use tensor_dsl::runtime::cuda::{self, CompiledKernel, DeviceBuffer};
    use tensor_dsl::template::gpu::default_schedule;
    use tensor_dsl::{tensor_kernel, Device, Error, Options, Tensor};

    #[tensor_kernel]
    fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
        c[[i, j]] += a[[i, k]] * b[[k, j]];
    }

    #[tensor_kernel]
    fn conv_bias_relu(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>, y: &mut Tensor<f32>) {
        y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]];
        y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);
    }

    #[tensor_kernel]
    fn dot(x: &Tensor<f32>, y: &Tensor<f32>, s: &mut Tensor<f32>) {
        s[[]] += x[[i]] * y[[i]];
    }

    /// The GPU, or `None` (the test skips; with `TENSOR_DSL_REQUIRE_GPU=1` it fails).
    fn gpu() -> Option<&'static cuda::DeviceInfo> {
        tensor_dsl::testing::gpu_info("this GPU test")
    }

    // ---------------------------------------------------------------------------------------------
    // Without a GPU
    // ---------------------------------------------------------------------------------------------

    fn assert_unavailable<T: std::fmt::Debug>(what: &str, r: Result<T, Error>, reason: &str) {
        match r {
            Err(Error::DeviceUnavailable { device, reason: r }) => {
                assert_eq!(device, "cuda", "{what}");
                assert_eq!(
                    r, reason,
                    "{what}: the detection reason should be passed on"
                );
            }
            other => panic!("{what}: expected DeviceUnavailable, got {other:?}"),
        }
    }

    #[test]
    fn without_a_gpu_everything_is_device_unavailable() {
        let Err(reason) = cuda::available() else {
            println!("a GPU is present; the no-GPU checks do not apply");
            return;
        };
        println!("skipping GPU checks: {reason}");
        assert!(reason.len() > 20, "reason too terse: {reason:?}");
        assert!(
            ["CUDA", "NVRTC", "GPU", "TENSOR_DSL_CUDA_DEVICE"]
                .iter()
                .any(|w| reason.contains(w)),
            "reason should say what is missing: {reason}"
        );
        // Memoized and stable.
        assert_eq!(cuda::available().unwrap_err(), reason);
        assert_eq!(Device::Cuda.availability().unwrap_err(), reason);
        assert_eq!(Device::Cpu.availability(), Ok(()));

        // Through the macro's wrapper, explicitly on CUDA.
        let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let b = Tensor::from_vec(vec![3, 1], vec![1.0f32, 1.0, 1.0]).unwrap();
        let mut c = Tensor::<f32>::zeros(&[2, 1]);
        let on_cuda = Options::new().device(Device::Cuda);
        assert_unavailable(
            "matmul on cuda",
            matmul::with(&on_cuda)(&a, &b, &mut c),
            &reason,
        );
        let msg = matmul::with(&on_cuda)(&a, &b, &mut c)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("cuda") && msg.contains(&reason), "{msg}");
        // The default falls back to the CPU (unless the environment names a device).
        if std::env::var("TENSOR_DSL_DEVICE").map_or(true, |v| v.trim().is_empty()) {
            assert_eq!(Options::new().resolve_device().unwrap(), Device::Cpu);
            matmul(&a, &b, &mut c).unwrap();
            assert_eq!(c.as_slice(), &[6.0, 15.0]);
        }

        // Every runtime entry point.
        let kernel = matmul::kernel();
        let shapes: [&[usize]; 3] = [&[2, 3], &[3, 1], &[2, 1]];
        let extents = bind(kernel, &shapes).unwrap();
        let data: [tensor_dsl::Data; 3] =
            [a.as_slice().into(), b.as_slice().into(), Default::default()];
        let mut out = [0.0f32; 2];
        assert_unavailable(
            "cuda::run",
            cuda::run(kernel, &extents, &shapes, &data, (&mut out).into()),
            &reason,
        );
        let schedule = default_schedule(
            kernel,
            &extents,
            &tensor_dsl::template::gpu::GpuTarget::h100(),
        );
        assert_unavailable(
            "cuda::run_with",
            cuda::run_with(
                kernel,
                &extents,
                &shapes,
                &data,
                (&mut out).into(),
                &schedule,
            ),
            &reason,
        );
        assert_unavailable(
            "cuda::compile",
            cuda::compile(kernel, &extents, &shapes, &schedule),
            &reason,
        );
        assert_unavailable(
            "DeviceBuffer::from_host",
            DeviceBuffer::from_host(&[1.0]),
            &reason,
        );
        assert_unavailable("DeviceBuffer::zeros", DeviceBuffer::zeros(4), &reason);
        assert_unavailable("cuda::synchronize", cuda::synchronize(), &reason);
    }

    // ---------------------------------------------------------------------------------------------
    // Detection against fake drivers, in child processes (LD_LIBRARY_PATH is read at start-up)
    // ---------------------------------------------------------------------------------------------

    const CHILD: &str = "TENSOR_DSL_CUDA_TEST_CHILD";

    /// Runs only as a child of `detection_in_child_processes`: prints what detection says and
    /// checks that a CUDA call fails cleanly.
    #[test]
    fn detection_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        match cuda::available() {
            Ok(info) => println!("AVAILABLE:{info}"),
            Err(reason) => println!("REASON:{reason}"),
        }
        let a = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap();
        let b = Tensor::from_vec(vec![2], vec![3.0f32, 4.0]).unwrap();
        let mut s = Tensor::<f32>::zeros(&[]);
        match dot::with(&Options::new().device(Device::Cuda))(&a, &b, &mut s) {
            Ok(()) => println!("CALL:ok {:?}", s.as_slice()),
            Err(Error::DeviceUnavailable { reason, .. }) => println!("CALL:unavailable:{reason}"),
            Err(e) => println!("CALL:error:{e}"),
        }
        // The default never fails because of CUDA.
        let mut s2 = Tensor::<f32>::zeros(&[]);
        if std::env::var_os("TENSOR_DSL_DEVICE").is_none() {
            match dot(&a, &b, &mut s2) {
                Ok(()) => println!("DEFAULT:ok {:?}", s2.as_slice()),
                Err(e) => println!("DEFAULT:error:{e}"),
            }
        }
    }

    struct Child {
        stdout: String,
        stderr: String,
        success: bool,
    }

    impl Child {
        /// The rest of the line after `tag` (the harness may print `test name ... ` before it).
        fn line(&self, tag: &str) -> Option<&str> {
            self.stdout
                .lines()
                .find_map(|l| l.find(tag).map(|i| &l[i + tag.len()..]))
        }
    }

    fn run_child(ld_path: &[&Path], env: &[(&str, &str)]) -> Child {
        let joined = std::env::join_paths(ld_path).unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        // The test's path inside this binary: `with_cuda::detection_child`.
        let name = match module_path!().split_once("::") {
            Some((_, module)) => format!("{module}::detection_child"),
            None => "detection_child".to_owned(),
        };
        cmd.args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("LD_LIBRARY_PATH", joined)
            .env_remove("TENSOR_DSL_DEVICE")
            .env_remove("TENSOR_DSL_CUDA_DEVICE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        Child {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            success: out.status.success(),
        }
    }

    /// The folder holding `libnvrtc.so.13`: `$TENSOR_DSL_TEST_NVRTC_DIR`, the CI wheel folder, or
    /// a folder on `LD_LIBRARY_PATH`.
    fn nvrtc_dir() -> Option<PathBuf> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(d) = std::env::var_os("TENSOR_DSL_TEST_NVRTC_DIR") {
            candidates.push(d.into());
        }
        let wheel = ".ci-deps/py/nvidia/cu13/lib";
        candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(wheel));
        if let Ok(cwd) = std::env::current_dir() {
            candidates.push(cwd.join(wheel));
            candidates.push(cwd.join("..").join(wheel));
        }
        if let Some(p) = std::env::var_os("LD_LIBRARY_PATH") {
            candidates.extend(std::env::split_paths(&p));
        }
        candidates
            .into_iter()
            .find(|d| d.join("libnvrtc.so.13").is_file())
    }

    /// A fake `libcuda.so` whose behaviour is picked by `FAKE_CUDA_MODE`:
    /// 0 cuInit fails (no device), 1 driver 12.4, 2 no GPU, 3 one "GPU" (then the context cannot
    /// be created: the fake has no cuDevicePrimaryCtxRetain). With `missing_device_get`, the
    /// library lacks `cuDeviceGet` (cudarc panics on a missing symbol).
    const FAKE_DRIVER: &str = r#"
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
static int mode(void) { const char *m = getenv("FAKE_CUDA_MODE"); return m ? atoi(m) : 0; }
CUresult cuInit(unsigned flags) { (void)flags; return mode() == 0 ? 100 : 0; }
CUresult cuDriverGetVersion(int *v) { *v = mode() == 1 ? 12040 : 13000; return 0; }
CUresult cuDeviceGetCount(int *c) { *c = mode() == 2 ? 0 : 1; return 0; }
#ifndef MISSING_DEVICE_GET
CUresult cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
#endif
CUresult cuDeviceGetName(char *name, int len, int dev) {
    (void)dev; strncpy(name, "Fake GPU", (size_t)len); return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)1 << 34; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    (void)dev;
    switch (attr) {
    case 75: *v = 9; break;          /* compute capability major */
    case 76: *v = 0; break;          /* minor */
    case 16: *v = 132; break;        /* SMs */
    case 10: *v = 32; break;         /* warp */
    case 8: *v = 49152; break;       /* shared per block */
    default: *v = 1024; break;
    }
    return 0;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == 100 ? "no CUDA-capable device is detected (fake)" : "fake error"; return 0;
}
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_FAKE"; return 0; }
"#;

    fn build_fake_driver(dir: &Path, missing_device_get: bool) -> Option<PathBuf> {
        std::fs::create_dir_all(dir).ok()?;
        let src = dir.join("fake_cuda.c");
        std::fs::write(&src, FAKE_DRIVER).ok()?;
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let mut cmd = Command::new(cc);
        cmd.args(["-shared", "-fPIC", "-o"])
            .arg(dir.join("libcuda.so"))
            .arg(&src);
        if missing_device_get {
            cmd.arg("-DMISSING_DEVICE_GET");
        }
        let ok = cmd.output().ok()?.status.success();
        ok.then(|| dir.to_path_buf())
    }

    #[test]
    fn detection_in_child_processes() {
        if std::env::var_os(CHILD).is_some() {
            return;
        }
        let nvrtc = nvrtc_dir();
        let parent_reason = cuda::available().err();

        // NVRTC on the path but no driver at all: only meaningful where there is no real driver.
        if let (Some(nv), Some(reason)) = (&nvrtc, &parent_reason) {
            if reason.starts_with("no CUDA driver") {
                let c = run_child(&[nv], &[]);
                assert!(c.success, "child failed:\n{}\n{}", c.stdout, c.stderr);
                let r = c.line("REASON:").expect(&c.stdout);
                assert!(r.contains("libcuda.so"), "{r}");
                let call = c.line("CALL:unavailable:").expect(&c.stdout);
                assert_eq!(call, r);
                assert_eq!(c.line("DEFAULT:ok "), Some("[11.0]"), "{}", c.stdout);
                println!("NVRTC but no driver: {r}");
            }
        }

        let base =
            std::env::temp_dir().join(format!("tensor-dsl-fake-cuda-{}", std::process::id()));
        let (Some(fake), Some(fake_missing)) = (
            build_fake_driver(&base.join("full"), false),
            build_fake_driver(&base.join("missing"), true),
        ) else {
            println!("skipping fake-driver checks: no C compiler");
            return;
        };
        let with_nvrtc = |dir: &Path| -> Vec<PathBuf> {
            let mut v = vec![dir.to_path_buf()];
            v.extend(nvrtc.clone());
            v
        };
        let check =
            |name: &str, dirs: &[PathBuf], env: &[(&str, &str)], expect: &[&str]| -> Child {
                let refs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
                let c = run_child(&refs, env);
                assert!(
                    c.success,
                    "{name}: child failed:\n{}\n{}",
                    c.stdout, c.stderr
                );
                let r = c
                    .line("REASON:")
                    .unwrap_or_else(|| panic!("{name}: no reason:\n{}", c.stdout));
                for e in expect {
                    assert!(r.contains(e), "{name}: reason {r:?} should mention {e:?}");
                }
                assert_eq!(
                    c.line("CALL:unavailable:"),
                    Some(r),
                    "{name}:\n{}",
                    c.stdout
                );
                assert_eq!(
                    c.line("DEFAULT:ok "),
                    Some("[11.0]"),
                    "{name}:\n{}",
                    c.stdout
                );
                println!("{name}: {r}");
                c
            };
        check(
            "cuInit fails",
            &with_nvrtc(&fake),
            &[("FAKE_CUDA_MODE", "0")],
            &["cuInit", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device"],
        );
        check(
            "old driver",
            &with_nvrtc(&fake),
            &[("FAKE_CUDA_MODE", "1")],
            &["12.4", "13.0", "update the driver"],
        );
        check(
            "no GPU",
            &with_nvrtc(&fake),
            &[("FAKE_CUDA_MODE", "2")],
            &["no GPU"],
        );
        check(
            "bad device index",
            &with_nvrtc(&fake),
            &[("FAKE_CUDA_MODE", "3"), ("TENSOR_DSL_CUDA_DEVICE", "5")],
            &["TENSOR_DSL_CUDA_DEVICE=5", "only 1 GPU"],
        );
        check(
            "unparsable device index",
            &with_nvrtc(&fake),
            &[("FAKE_CUDA_MODE", "3"), ("TENSOR_DSL_CUDA_DEVICE", "first")],
            &["TENSOR_DSL_CUDA_DEVICE", "not a device index"],
        );
        check(
            "missing driver symbol",
            &with_nvrtc(&fake_missing),
            &[("FAKE_CUDA_MODE", "3")],
            &["cuDeviceGet"],
        );

        // A "GPU" that detection accepts: then NVRTC is checked, then the context cannot be made
        // (the fake lacks the symbol): the call is DeviceUnavailable, the default still the CPU...
        let c = run_child(
            &with_nvrtc(&fake)
                .iter()
                .map(|d| d.as_path())
                .collect::<Vec<_>>(),
            &[("FAKE_CUDA_MODE", "3")],
        );
        assert!(
            c.success,
            "fake GPU: child failed:\n{}\n{}",
            c.stdout, c.stderr
        );
        match (c.line("AVAILABLE:"), c.line("REASON:")) {
            (Some(info), None) => {
                // NVRTC was found: detection reports the fake device; the call cannot create a
                // context and says so.
                assert!(
                    info.contains("Fake GPU") && info.contains("sm_90"),
                    "{info}"
                );
                let call = c.line("CALL:unavailable:").expect(&c.stdout);
                assert!(call.contains("CUDA context"), "{call}");
                // ...and the default, which picks CUDA when detection succeeds, reports it.
                assert!(c.line("DEFAULT:error:").is_some(), "{}", c.stdout);
                println!("fake GPU: detected {info}; call: {call}");
            }
            (None, Some(r)) => {
                assert!(r.contains("NVRTC"), "{r}");
                println!("fake GPU without NVRTC: {r}");
            }
            _ => panic!("fake GPU:\n{}", c.stdout),
        }
        // The same device with no NVRTC on the path (unless the system has one).
        let c = run_child(&[fake.as_path()], &[("FAKE_CUDA_MODE", "3")]);
        assert!(c.success, "{}\n{}", c.stdout, c.stderr);
        if let Some(r) = c.line("REASON:") {
            assert!(
                r.contains("NVRTC") && r.contains("LD_LIBRARY_PATH") && r.contains("Fake GPU"),
                "{r}"
            );
            println!("driver but no NVRTC: {r}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    // ---------------------------------------------------------------------------------------------
    // With a GPU
    // ---------------------------------------------------------------------------------------------

    fn artifacts() -> PathBuf {
        std::env::var_os("TENSOR_DSL_TEST_ARTIFACTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("tensor-dsl-cuda-test"))
    }

    /// Relative tolerance of the comparisons with the reference (which sums in f64).
    const TOL: f32 = 1e-4;

    fn close_to(got: f32, want: f32, tol: f32) -> bool {
        (got.is_nan() && want.is_nan()) || (got - want).abs() <= tol * (1.0 + want.abs())
    }

    fn close(got: f32, want: f32) -> bool {
        close_to(got, want, TOL)
    }

    /// One kernel at one shape with random data and its reference result.
    struct Case {
        src: String,
        kernel: Kernel,
        extents: Vec<usize>,
        shapes: Vec<Vec<usize>>,
        data: Vec<Vec<f32>>,
        want: Vec<f32>,
        /// [`TOL`], looser only for huge reductions (f32 summation error grows with length).
        tol: f32,
    }

    impl Case {
        fn new(
            src: &str,
            params: Option<&[(&str, bool)]>,
            shapes: Vec<Vec<usize>>,
            seed: u64,
        ) -> Case {
            let params: Option<Vec<(String, bool)>> =
                params.map(|ps| ps.iter().map(|(n, o)| (n.to_string(), *o)).collect());
            let kernel = parse_text("k", src, params.as_deref()).unwrap();
            let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            let extents = bind(&kernel, &refs).unwrap_or_else(|e| panic!("{src} {shapes:?}: {e}"));
            let mut rng = StdRng::seed_from_u64(seed);
            let data: Vec<Vec<f32>> = shapes
                .iter()
                .enumerate()
                .map(|(p, s)| {
                    if p == kernel.output {
                        Vec::new()
                    } else {
                        (0..s.iter().product::<usize>())
                            .map(|_| rng.gen_range(-1.0..1.0))
                            .collect()
                    }
                })
                .collect();
            let mut case = Case {
                src: src.into(),
                kernel,
                extents,
                shapes,
                data,
                want: Vec::new(),
                tol: TOL,
            };
            let mut want = vec![0.0; case.out_len()];
            let (shapes, data) = (case.shape_refs(), case.data_refs());
            tensor_dsl::reference::run(
                &case.kernel,
                &case.extents,
                &shapes,
                &data,
                (&mut want).into(),
            );
            case.want = want;
            case
        }

        fn shape_refs(&self) -> Vec<&[usize]> {
            self.shapes.iter().map(|s| s.as_slice()).collect()
        }

        fn data_refs(&self) -> Vec<tensor_dsl::Data<'_>> {
            self.data.iter().map(Into::into).collect()
        }

        fn out_len(&self) -> usize {
            self.shapes[self.kernel.output].iter().product()
        }

        fn compiled(&self, gpu: &cuda::DeviceInfo) -> Result<Arc<CompiledKernel>, Error> {
            let schedule = default_schedule(&self.kernel, &self.extents, &gpu.target());
            cuda::compile(&self.kernel, &self.extents, &self.shape_refs(), &schedule)
        }

        /// Everything needed to reproduce a failure, with the generated source saved to a file.
        fn report(&self, gpu: &cuda::DeviceInfo, what: &str) -> String {
            let mut s = format!(
                "{what}\n  kernel: {}\n  shapes: {:?}\n  extents: {:?}",
                self.src, self.shapes, self.extents
            );
            let schedule = default_schedule(&self.kernel, &self.extents, &gpu.target());
            s.push_str(&format!("\n  schedule: {schedule:?}"));
            match self.compiled(gpu) {
                Ok(k) => {
                    s.push_str(&format!("\n  {}", k.describe()));
                    match k.save_source(&artifacts()) {
                        Ok(p) => s.push_str(&format!("\n  source: {}", p.display())),
                        Err(e) => s.push_str(&format!("\n  (source not saved: {e})")),
                    }
                }
                Err(e) => s.push_str(&format!("\n  compile: {e}")),
            }
            s
        }

        /// `None` when `got` matches the reference, else the first mismatches.
        fn mismatch(&self, got: &[f32]) -> Option<String> {
            if got.len() != self.want.len() {
                return Some(format!(
                    "{} elements, expected {}",
                    got.len(),
                    self.want.len()
                ));
            }
            let bad: Vec<String> = got
                .iter()
                .zip(&self.want)
                .enumerate()
                .filter(|(_, (g, w))| !close_to(**g, **w, self.tol))
                .take(5)
                .map(|(n, (g, w))| format!("element {n}: gpu {g} vs reference {w}"))
                .collect();
            (!bad.is_empty()).then(|| {
                let total = got
                    .iter()
                    .zip(&self.want)
                    .filter(|(g, w)| !close_to(**g, **w, self.tol))
                    .count();
                format!(
                    "{total} of {} elements differ: {}",
                    got.len(),
                    bad.join("; ")
                )
            })
        }

        /// Host path, then device path (output prefilled with NaN: it must be fully overwritten).
        fn check(&self, gpu: &cuda::DeviceInfo) -> Vec<String> {
            let mut failures = Vec::new();
            let mut got = vec![f32::NAN; self.out_len()];
            match cuda::run(
                &self.kernel,
                &self.extents,
                &self.shape_refs(),
                &self.data_refs(),
                (&mut got).into(),
            ) {
                Err(e) => failures.push(self.report(gpu, &format!("cuda::run failed: {e}"))),
                Ok(()) => {
                    if let Some(m) = self.mismatch(&got) {
                        failures.push(self.report(gpu, &format!("cuda::run: {m}")));
                    }
                }
            }
            let device = || -> Result<Vec<f32>, Error> {
                let k = self.compiled(gpu)?;
                let inputs = self
                    .kernel
                    .inputs()
                    .iter()
                    .map(|&p| DeviceBuffer::from_host(&self.data[p]))
                    .collect::<Result<Vec<_>, _>>()?;
                let refs: Vec<&DeviceBuffer> = inputs.iter().collect();
                let mut out = DeviceBuffer::from_host(&vec![f32::NAN; self.out_len()])?;
                k.launch(&refs, &mut out)?;
                let first = out.to_host()?;
                // Launching again over its own result must overwrite it, not accumulate into it
                // (compared with tolerance: atomics may sum in another order).
                k.launch(&refs, &mut out)?;
                let second = out.to_host()?;
                if let Some(m) = self.mismatch(&second) {
                    return Err(Error::Backend {
                        kernel: self.kernel.name.clone(),
                        message: format!("second launch over the first one's output: {m}"),
                    });
                }
                Ok(first)
            };
            match device() {
                Err(e) => failures.push(self.report(gpu, &format!("device path failed: {e}"))),
                Ok(got) => {
                    if let Some(m) = self.mismatch(&got) {
                        failures.push(self.report(gpu, &format!("device path: {m}")));
                    }
                }
            }
            failures
        }
    }

    fn finish(failures: Vec<String>) {
        if !failures.is_empty() {
            panic!(
                "{} failure(s):\n\n{}",
                failures.len(),
                failures.join("\n\n")
            );
        }
    }

    const MATMUL: &str = "c[[i, j]] += a[[i, k]] * b[[k, j]]";
    const CONV: &str = "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])";
    const DOT: &str = "s[[]] += a[[i]] * b[[i]]";

    fn v(x: &[usize]) -> Vec<usize> {
        x.to_vec()
    }

    #[test]
    fn gpu_device_info() {
        let Some(gpu) = gpu() else { return };
        println!("GPU: {gpu}\n{gpu:#?}");
        let t = gpu.target();
        assert!(gpu.sm() >= 75, "{gpu}");
        assert!(gpu.sm_count > 0 && gpu.warp_size == 32);
        assert!(gpu.max_threads_per_block >= 1024 && gpu.max_shared_per_block >= 48 * 1024);
        assert!(gpu.max_shared_per_block_optin >= gpu.max_shared_per_block);
        assert_eq!(t.sm, gpu.sm());
        // A 9.0 GPU compiles for its architecture-specific target (wgmma).
        let suffix = if gpu.sm() == 90 { "a" } else { "" };
        assert_eq!(t.virtual_arch(), format!("compute_{}{suffix}", gpu.sm()));
        assert_eq!(t.has_wgmma(), gpu.sm() == 90);
        // The opt-in shared memory the templates plan with is what the driver allows.
        assert!(t.max_dynamic_shared() <= gpu.max_shared_per_block_optin);
        assert_eq!(Device::Cuda.availability(), Ok(()));
        if std::env::var("TENSOR_DSL_DEVICE").map_or(true, |v| v.trim().is_empty()) {
            assert_eq!(Options::new().resolve_device().unwrap(), Device::Cuda);
        }
    }

    #[test]
    fn gpu_matmul_awkward_shapes() {
        let Some(gpu) = gpu() else { return };
        let mut failures = Vec::new();
        for (n, &(m, k, nn)) in [
            (1, 1, 1),
            (1, 7, 1),
            (2, 3, 1),
            (17, 31, 13),
            (33, 1, 65),
            (64, 64, 64),
            (127, 257, 61),
            (256, 1000, 3),
            (1000, 17, 1000),
            (512, 1024, 64),
            (97, 4096, 1),
        ]
        .iter()
        .enumerate()
        {
            let case = Case::new(
                MATMUL,
                None,
                vec![v(&[m, k]), v(&[k, nn]), v(&[m, nn])],
                n as u64,
            );
            failures.extend(case.check(gpu));
        }
        // Output declared first, transposed operands.
        let params: &[(&str, bool)] = &[("c", true), ("a", false), ("b", false)];
        for (n, &(m, k, nn)) in [(5, 3, 7), (129, 65, 33)].iter().enumerate() {
            let case = Case::new(
                "c[[i, j]] += a[[k, i]] * b[[j, k]]",
                Some(params),
                vec![v(&[m, nn]), v(&[k, m]), v(&[nn, k])],
                100 + n as u64,
            );
            failures.extend(case.check(gpu));
        }
        finish(failures);
    }

    #[test]
    fn gpu_conv_with_epilogue() {
        let Some(gpu) = gpu() else { return };
        let mut failures = Vec::new();
        // (n, c, h, w, f): output p = q = ceil(h / 2) with stride 2, pad 1, 3x3.
        for (seed, &(n, c, h, w, f)) in [
            (1usize, 1usize, 1usize, 1usize, 1usize),
            (1, 3, 17, 17, 5),
            (2, 3, 32, 32, 16),
            (1, 64, 56, 56, 64),
            (3, 7, 13, 9, 11),
        ]
        .iter()
        .enumerate()
        {
            let (p, q): (usize, usize) = (h.div_ceil(2), w.div_ceil(2));
            let shapes = vec![
                v(&[n, c, h, w]),
                v(&[f, c, 3, 3]),
                v(&[f]),
                v(&[n, f, p, q]),
            ];
            let case = Case::new(CONV, None, shapes, 200 + seed as u64);
            failures.extend(case.check(gpu));
        }
        finish(failures);
    }

    #[test]
    fn gpu_dot_product() {
        let Some(gpu) = gpu() else { return };
        let mut failures = Vec::new();
        for (seed, &len) in [1usize, 2, 31, 1000, 65_537, 1_000_003].iter().enumerate() {
            let mut case = Case::new(
                DOT,
                None,
                vec![v(&[len]), v(&[len]), vec![]],
                300 + seed as u64,
            );
            if len > 100_000 {
                // A million f32 additions: even a good summation order can drift past 1e-4.
                case.tol = 1e-3;
            }
            failures.extend(case.check(gpu));
        }
        finish(failures);
    }

    const AWKWARD: &[usize] = &[1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33, 64, 100, 129];

    /// Random shapes for `kernel`: plain dimensions take the index's extent, affine ones a random
    /// size around the range they read (so padding is exercised).
    fn random_shapes(kernel: &Kernel, rng: &mut StdRng) -> Option<Vec<Vec<usize>>> {
        // One extent for every index a third of the time: a kernel that reads one tensor
        // twice (`a[[i, k]] * a[[k, j]]`) is consistent only then.
        let same = rng
            .gen_bool(1.0 / 3.0)
            .then(|| AWKWARD[rng.gen_range(0..AWKWARD.len())]);
        let extents: Vec<usize> = kernel
            .indices
            .iter()
            .map(|_| same.unwrap_or_else(|| AWKWARD[rng.gen_range(0..AWKWARD.len())]))
            .collect();
        let (bound, shapes) = crate::common::shapes_for(kernel, &extents, |hi| {
            rng.gen_range(1..=(hi.max(0) as usize + 2))
        })?;
        // Keep the reference interpreter fast.
        let work: f64 = bound.iter().map(|&e| e as f64).product();
        (work <= 5e7).then_some(shapes)
    }

    #[test]
    fn gpu_matches_reference_on_random_shapes() {
        let Some(gpu) = gpu() else { return };
        let mut failures = Vec::new();
        for (n, src) in crate::common::KERNELS.iter().enumerate() {
            let kernel = parse_text("k", src, None).unwrap();
            let mut rng = StdRng::seed_from_u64(1000 + n as u64);
            let mut ran = 0;
            for attempt in 0..60 {
                if ran == 3 {
                    break;
                }
                let Some(shapes) = random_shapes(&kernel, &mut rng) else {
                    continue;
                };
                ran += 1;
                let case = Case::new(src, None, shapes, (n * 100 + attempt) as u64);
                failures.extend(case.check(gpu));
            }
            assert!(ran > 0, "{src}: no consistent random shape found");
        }
        finish(failures);
    }

    #[test]
    fn gpu_through_tensor_kernel_dispatch() {
        let Some(_) = gpu() else { return };
        let on_cuda = Options::new().device(Device::Cuda);
        let reference = Options::new().device(Device::Reference);
        let mut rng = StdRng::seed_from_u64(7);
        let mut random = |shape: &[usize]| {
            let n = shape.iter().product();
            Tensor::from_vec(
                shape.to_vec(),
                (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect(),
            )
            .unwrap()
        };
        let check = |what: &str, got: &Tensor<f32>, want: &Tensor<f32>| {
            for (n, (g, w)) in got.as_slice().iter().zip(want.as_slice()).enumerate() {
                assert!(
                    close(*g, *w),
                    "{what}: element {n}: cuda {g} vs reference {w}"
                );
            }
        };

        let (a, b) = (random(&[123, 77]), random(&[77, 45]));
        let (mut c, mut c_ref) = (Tensor::zeros(&[123, 45]), Tensor::zeros(&[123, 45]));
        matmul::with(&on_cuda)(&a, &b, &mut c).unwrap();
        matmul::with(&reference)(&a, &b, &mut c_ref).unwrap();
        check("matmul", &c, &c_ref);

        let (x, w, bias) = (random(&[2, 3, 15, 15]), random(&[8, 3, 3, 3]), random(&[8]));
        let (mut y, mut y_ref) = (Tensor::zeros(&[2, 8, 8, 8]), Tensor::zeros(&[2, 8, 8, 8]));
        conv_bias_relu::with(&on_cuda)(&x, &w, &bias, &mut y).unwrap();
        conv_bias_relu::with(&reference)(&x, &w, &bias, &mut y_ref).unwrap();
        check("conv_bias_relu", &y, &y_ref);

        let (p, q) = (random(&[4097]), random(&[4097]));
        let (mut s, mut s_ref) = (Tensor::zeros(&[]), Tensor::zeros(&[]));
        dot::with(&on_cuda)(&p, &q, &mut s).unwrap();
        dot::with(&reference)(&p, &q, &mut s_ref).unwrap();
        check("dot", &s, &s_ref);

        // Shape errors are still errors (checked before any device work).
        let mut wrong = Tensor::zeros(&[5, 5]);
        assert!(matches!(
            matmul::with(&on_cuda)(&a, &b, &mut wrong),
            Err(Error::Shape(_))
        ));
    }

    #[test]
    fn gpu_compiled_kernel_is_memoized_and_checks_its_arguments() {
        let Some(gpu) = gpu() else { return };
        let case = Case::new(MATMUL, None, vec![v(&[9, 5]), v(&[5, 3]), v(&[9, 3])], 1);
        let k1 = case
            .compiled(gpu)
            .unwrap_or_else(|e| panic!("{}", case.report(gpu, &e.to_string())));
        let k2 = case.compiled(gpu).unwrap();
        assert!(Arc::ptr_eq(&k1, &k2), "compile should be memoized");
        assert!(!k1.source().is_empty());
        // What runs is the CUBIN NVRTC assembled for this GPU, not PTX for the driver.
        match k1.image() {
            tensor_dsl::runtime::cubin::Image::Cubin { arch, bytes } => {
                // `sm_90a` on an H100: the device's own architecture-specific target.
                assert_eq!(*arch, gpu.target().real_arch());
                let r = tensor_dsl::runtime::cubin::resources(bytes, None).unwrap();
                assert_eq!(
                    r.registers,
                    k1.attributes().registers,
                    "the file and the driver agree"
                );
            }
            other => panic!("expected a CUBIN, got {}", other.kind()),
        }
        assert!(k1.ptx().is_none());
        println!("{}", k1.describe());

        let a = DeviceBuffer::from_host(&case.data[0]).unwrap();
        let b = DeviceBuffer::from_host(&case.data[1]).unwrap();
        let mut c = DeviceBuffer::zeros(27).unwrap();
        assert_eq!((a.len(), b.len(), c.len()), (45, 15, 27));
        let backend = |r: Result<(), Error>| matches!(r, Err(Error::Backend { .. }));
        assert!(backend(k1.launch(&[&a], &mut c)), "too few inputs");
        assert!(backend(k1.launch(&[&a, &b, &b], &mut c)), "too many inputs");
        assert!(backend(k1.launch(&[&b, &a], &mut c)), "inputs swapped");
        let mut small = DeviceBuffer::zeros(26).unwrap();
        assert!(backend(k1.launch(&[&a, &b], &mut small)), "short output");
        assert!(k1.time(&[&a], &mut c, 1, 1).is_err());
        k1.launch(&[&a, &b], &mut c).unwrap();
        assert!(case.mismatch(&c.to_host().unwrap()).is_none());

        // Host-path length checks.
        let mut out = vec![0.0f32; 26];
        let r = cuda::run(
            &case.kernel,
            &case.extents,
            &case.shape_refs(),
            &case.data_refs(),
            (&mut out).into(),
        );
        assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");
        let mut out = vec![0.0f32; 27];
        let short: Vec<tensor_dsl::Data> = vec![
            case.data[0][..44].into(),
            (&case.data[1]).into(),
            Default::default(),
        ];
        let r = cuda::run(
            &case.kernel,
            &case.extents,
            &case.shape_refs(),
            &short,
            (&mut out).into(),
        );
        assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");

        // Buffer copies check lengths; empty buffers work.
        let mut buf = DeviceBuffer::zeros(3).unwrap();
        assert!(buf.copy_from_host(&[1.0, 2.0]).is_err());
        buf.copy_from_host(&[1.0, 2.0, 3.0]).unwrap();
        let mut host = [0.0f32; 2];
        assert!(buf.copy_to_host(&mut host).is_err());
        assert_eq!(buf.to_host().unwrap(), vec![1.0, 2.0, 3.0]);
        let empty = DeviceBuffer::from_host(&[]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.to_host().unwrap(), Vec::<f32>::new());
        cuda::synchronize().unwrap();
    }

    #[test]
    fn gpu_timing() {
        let Some(gpu) = gpu() else { return };
        for (src, shapes) in [
            (MATMUL, vec![v(&[512, 1024]), v(&[1024, 64]), v(&[512, 64])]),
            (
                MATMUL,
                vec![v(&[1024, 1024]), v(&[1024, 1024]), v(&[1024, 1024])],
            ),
            (
                CONV,
                vec![
                    v(&[1, 64, 56, 56]),
                    v(&[64, 64, 3, 3]),
                    v(&[64]),
                    v(&[1, 64, 28, 28]),
                ],
            ),
            (DOT, vec![v(&[1 << 20]), v(&[1 << 20]), vec![]]),
        ] {
            // No reference here (too slow for the big ones): the other tests check correctness.
            let kernel = parse_text("k", src, None).unwrap();
            let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            let extents = bind(&kernel, &refs).unwrap();
            let schedule = default_schedule(&kernel, &extents, &gpu.target());
            let k = cuda::compile(&kernel, &extents, &refs, &schedule)
                .unwrap_or_else(|e| panic!("{src} {shapes:?}: {e}"));
            let inputs: Vec<DeviceBuffer> = kernel
                .inputs()
                .iter()
                .map(|&p| DeviceBuffer::zeros(shapes[p].iter().product()).unwrap())
                .collect();
            let refs_in: Vec<&DeviceBuffer> = inputs.iter().collect();
            let mut out = DeviceBuffer::zeros(shapes[kernel.output].iter().product()).unwrap();
            let times = k
                .time(&refs_in, &mut out, 3, 10)
                .unwrap_or_else(|e| panic!("{src} {shapes:?}: {e}\n{}", k.describe()));
            assert_eq!(times.len(), 10);
            assert!(times.iter().all(|t| t.is_finite() && *t > 0.0), "{times:?}");
            // A CUDA graph of enough launches to last 200 µs.
            let plan = tensor_dsl::runtime::graph_timing::TimingPlan::default();
            let t = k.timing(&refs_in, &mut out, &plan, 3).unwrap();
            assert_eq!(
                t.method,
                tensor_dsl::runtime::graph_timing::Method::Graph,
                "{t:?}"
            );
            assert!(t.note.is_none(), "{t:?}");
            assert!(
                t.launches == plan.max_launches
                    || t.launches as f64 * t.warmup_seconds >= 0.9 * plan.min_sample_seconds,
                "{t:?}"
            );
            println!("  timing: {t:?}");
            assert!(k.time(&refs_in, &mut out, 0, 0).unwrap().is_empty());
            let mut sorted = times.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2];
            let gflops = kernel.flops(&extents) / median / 1e9;
            println!(
                "{src} {shapes:?}: median {:.2} µs ({gflops:.1} GFLOP/s) on {}\n  {}",
                median * 1e6,
                gpu.name,
                k.describe()
            );
        }
    }

    #[test]
    fn gpu_concurrent_calls() {
        let Some(gpu) = gpu() else { return };
        let cases: Vec<Case> = (0..4)
            .map(|t| {
                let m = 30 + 7 * t;
                Case::new(
                    MATMUL,
                    None,
                    vec![v(&[m, 19]), v(&[19, 23]), v(&[m, 23])],
                    900 + t as u64,
                )
            })
            .collect();
        // One more thread times a kernel meanwhile: its CUDA graph is captured on a private
        // stream, so the other threads' launches are neither captured nor lost.
        let timed = Case::new(
            MATMUL,
            None,
            vec![v(&[64, 64]), v(&[64, 64]), v(&[64, 64])],
            990,
        );
        let failures: Vec<String> = std::thread::scope(|scope| {
            let mut handles: Vec<_> = cases
                .iter()
                .map(|case| {
                    scope.spawn(move || {
                        let mut f = Vec::new();
                        for _ in 0..5 {
                            f.extend(case.check(gpu));
                        }
                        f
                    })
                })
                .collect();
            let timed = &timed;
            handles.push(scope.spawn(move || {
                let k = timed.compiled(gpu).unwrap();
                let a = DeviceBuffer::from_host(&timed.data[0]).unwrap();
                let b = DeviceBuffer::from_host(&timed.data[1]).unwrap();
                let mut c = DeviceBuffer::zeros(64 * 64).unwrap();
                let mut f = Vec::new();
                for _ in 0..5 {
                    match k.time(&[&a, &b], &mut c, 1, 3) {
                        Ok(t) if t.len() == 3 => {}
                        other => f.push(format!("timing while others run: {other:?}")),
                    }
                }
                f.extend(timed.mismatch(&c.to_host().unwrap()));
                f
            }));
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        finish(failures);
    }

    // -----------------------------------------------------------------------------------------
    // The runtime's mechanics with hand-written CUDA C (independent of the generator)
    // -----------------------------------------------------------------------------------------

    fn handwritten(source: String, grid: [u32; 3], block: [u32; 3], shared: u32) -> CudaSource {
        CudaSource {
            source,
            entry: "td_kernel".into(),
            grid,
            block,
            shared_bytes: shared,
            tensor_maps: Vec::new(),
        }
    }

    fn naive_matmul(m: usize, k: usize, n: usize) -> CudaSource {
        let source = format!(
            r#"extern "C" __global__ void td_kernel(const float *__restrict__ a,
                                   const float *__restrict__ b, float *__restrict__ c) {{
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < {m} && j < {n}) {{
        float acc = 0.0f;
        for (int k = 0; k < {k}; ++k) acc += a[i * {k} + k] * b[k * {n} + j];
        c[i * {n} + j] = acc;
    }}
}}
"#
        );
        let grid = [n.div_ceil(16) as u32, m.div_ceil(16) as u32, 1];
        handwritten(source, grid, [16, 16, 1], 0)
    }

    #[test]
    fn gpu_handwritten_kernels() {
        let Some(gpu) = gpu() else { return };
        let mut failures = Vec::new();
        // Matmul, awkward shape.
        let (m, k, n) = (67, 129, 35);
        let case = Case::new(MATMUL, None, vec![v(&[m, k]), v(&[k, n]), v(&[m, n])], 11);
        let shapes = case.shape_refs();
        let kern = cuda::compile_source(&case.kernel, &shapes, naive_matmul(m, k, n))
            .unwrap_or_else(|e| panic!("hand-written matmul: {e}"));
        println!("{}", kern.describe());
        assert!(kern.attributes().registers > 0);
        let a = DeviceBuffer::from_host(&case.data[0]).unwrap();
        let b = DeviceBuffer::from_host(&case.data[1]).unwrap();
        let mut c = DeviceBuffer::from_host(&vec![f32::NAN; m * n]).unwrap();
        kern.launch(&[&a, &b], &mut c).unwrap();
        if let Some(e) = case.mismatch(&c.to_host().unwrap()) {
            failures.push(format!("hand-written matmul: {e}"));
        }
        let t = kern.time(&[&a, &b], &mut c, 2, 7).unwrap();
        assert_eq!(t.len(), 7);
        assert!(t.iter().all(|x| x.is_finite() && *x > 0.0), "{t:?}");

        // 64 KiB of dynamic shared memory: needs the opt-in attribute.
        let len = 100_000usize;
        let case = Case::new(
            "o[[i]] = a[[i]] * 2.0",
            None,
            vec![v(&[len]), v(&[len])],
            12,
        );
        let per_block = 16 * 1024; // floats = 64 KiB
        let source = format!(
            r#"extern "C" __global__ void td_kernel(const float *__restrict__ a, float *__restrict__ o) {{
    extern __shared__ float stage[];
    long base = (long)blockIdx.x * {per_block};
    for (int t = threadIdx.x; t < {per_block}; t += blockDim.x)
        stage[t] = base + t < {len} ? a[base + t] : 0.0f;
    __syncthreads();
    for (int t = threadIdx.x; t < {per_block}; t += blockDim.x)
        if (base + t < {len}) o[base + t] = stage[t] * 2.0f;
}}
"#
        );
        let grid = [len.div_ceil(per_block) as u32, 1, 1];
        let shared = (per_block * 4) as u32;
        if shared <= gpu.max_shared_per_block_optin {
            let kern = cuda::compile_source(
                &case.kernel,
                &case.shape_refs(),
                handwritten(source, grid, [256, 1, 1], shared),
            )
            .unwrap_or_else(|e| panic!("64 KiB shared: {e}"));
            let a = DeviceBuffer::from_host(&case.data[0]).unwrap();
            let mut o = DeviceBuffer::zeros(len).unwrap();
            kern.launch(&[&a], &mut o).unwrap();
            if let Some(e) = case.mismatch(&o.to_host().unwrap()) {
                failures.push(format!("64 KiB shared: {e}"));
            }
        }

        // Geometry the device cannot run is an error at compile time, not a crash.
        let case = Case::new(MATMUL, None, vec![v(&[4, 4]), v(&[4, 4]), v(&[4, 4])], 13);
        let mut too_big = naive_matmul(4, 4, 4);
        too_big.block = [2048, 1, 1];
        let r = cuda::compile_source(&case.kernel, &case.shape_refs(), too_big);
        assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");
        let mut zero_grid = naive_matmul(4, 4, 4);
        zero_grid.grid = [0, 1, 1];
        let r = cuda::compile_source(&case.kernel, &case.shape_refs(), zero_grid);
        assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");
        let mut greedy = naive_matmul(4, 4, 4);
        greedy.shared_bytes = gpu.max_shared_per_block_optin + 1;
        let r = cuda::compile_source(&case.kernel, &case.shape_refs(), greedy);
        assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");
        // A source that does not compile: NVRTC's log, and where the source was saved.
        let broken = handwritten("this is not CUDA".into(), [1, 1, 1], [1, 1, 1], 0);
        match cuda::compile_source(&case.kernel, &case.shape_refs(), broken) {
            Err(Error::Compile { log, .. }) => {
                assert!(log.contains("generated source:"), "{log}")
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
        // A missing entry point.
        let mut wrong_entry = naive_matmul(4, 4, 4);
        wrong_entry.entry = "not_there".into();
        let r = cuda::compile_source(&case.kernel, &case.shape_refs(), wrong_entry);
        // Reading the CUBIN's resources finds no such kernel (a compile error), or loading it
        // does (a backend error): either way an error that names it.
        assert!(
            matches!(&r, Err(Error::Backend { message, .. }) if message.contains("not_there"))
                || matches!(&r, Err(Error::Compile { log, .. }) if log.contains("not_there")),
            "{r:?}"
        );
        // Still healthy.
        cuda::synchronize().unwrap();
        finish(failures);
    }

    const FAULT_CHILD: &str = "TENSOR_DSL_CUDA_TEST_FAULT_CHILD";

    /// Runs only as a child of `gpu_kernel_fault_is_an_error_and_sticky`: a kernel writes far
    /// out of bounds; the error must come back as a value, and later calls must say the context
    /// is lost (a sticky error) instead of hanging or crashing.
    #[test]
    fn fault_child() {
        if std::env::var_os(FAULT_CHILD).is_none() {
            return;
        }
        let case = Case::new("o[[i]] = a[[i]]", None, vec![v(&[32]), v(&[32])], 14);
        let source = r#"extern "C" __global__ void td_kernel(const float *__restrict__ a, float *__restrict__ o) {
    o[threadIdx.x + (1ll << 40)] = a[threadIdx.x];
}
"#;
        let kern = cuda::compile_source(
            &case.kernel,
            &case.shape_refs(),
            handwritten(source.into(), [1, 1, 1], [32, 1, 1], 0),
        )
        .unwrap();
        let a = DeviceBuffer::from_host(&case.data[0]).unwrap();
        let mut o = DeviceBuffer::zeros(32).unwrap();
        let launched = kern.launch(&[&a], &mut o);
        println!("LAUNCH:{launched:?}");
        match cuda::synchronize() {
            Ok(()) => println!("SYNC:ok"),
            Err(e) => println!("SYNC:{e}"),
        }
        match DeviceBuffer::zeros(4) {
            Ok(_) => println!("AFTER:ok"),
            Err(e) => println!("AFTER:{e}"),
        }
        match kern.launch(&[&a], &mut o) {
            Ok(()) => println!("RELAUNCH:ok"),
            Err(e) => println!("RELAUNCH:{e}"),
        }
    }

    #[test]
    fn gpu_kernel_fault_is_an_error_and_sticky() {
        if std::env::var_os(FAULT_CHILD).is_some() || gpu().is_none() {
            return;
        }
        let name = match module_path!().split_once("::") {
            Some((_, module)) => format!("{module}::fault_child"),
            None => "fault_child".to_owned(),
        };
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(FAULT_CHILD, "1")
            .output()
            .unwrap();
        let c = Child {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            success: out.status.success(),
        };
        assert!(c.success, "child crashed:\n{}\n{}", c.stdout, c.stderr);
        let sync = c.line("SYNC:").expect(&c.stdout);
        assert!(
            sync.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && sync.contains("sticky"),
            "{sync}"
        );
        let after = c.line("AFTER:").expect(&c.stdout);
        assert!(after.contains("lost"), "{after}");
        let relaunch = c.line("RELAUNCH:").expect(&c.stdout);
        assert!(relaunch.contains("lost"), "{relaunch}");
        println!("fault: {sync}\nafterwards: {after}");
    }
}

//! Every kind of kernel, with the default GPU schedule and a few hundred random points of
//! the template's space (seeded), through the real NVRTC (`compute_90`) and
//! `ptxas -arch=sm_90 -v`: each must compile and assemble, and the shared memory ptxas
//! reports must be what the schedule computes and within the target's limit. What ptxas
//! says (registers, spills, shared memory) is written to `target/ptxas-report.json`.
//!
//! Without NVRTC (`libnvrtc.so.13` on the library path) or `ptxas` (on `PATH` or
//! `TENSOR_DSL_PTXAS`) the test prints why and passes, unless `TENSOR_DSL_REQUIRE_NVRTC=1`
//! (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, SeedableRng};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Mutex;
use tensor_dsl::codegen::cuda;
use tensor_dsl::ir::Kernel;
use tensor_dsl::template::gpu::{GpuSchedule, GpuTarget, GpuTemplate};

/// (name, statements, extents of the indices in order of appearance as `bind` numbers them
/// — given as the shapes of the parameters, output last).
const KERNELS: &[(&str, &str, &str)] = &[
    (
        "matmul",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1024x1024 b=1024x1024 c=1024x1024",
    ),
    (
        "matmul_prime",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=127x131 b=131x137 c=127x137",
    ),
    (
        "matmul_awkward",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1021 b=1021x777 c=1000x777",
    ),
    (
        "batch_matmul_transposed",
        "z[[b, m, n]] += x[[b, k, m]] * y[[b, k, n]]",
        "x=8x256x256 y=8x256x256 z=8x256x256",
    ),
    (
        "conv_bias_relu",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        "x=8x64x56x56 w=128x64x3x3 bias=128 y=8x128x28x28",
    ),
    (
        "chain",
        "o[[i]] += a[[i, j]] * b[[j, l]] * c[[l]] * d[[i]]",
        "a=1024x512 b=512x256 c=256 d=1024 o=1024",
    ),
    (
        "three_matrices",
        "o[[i, l]] += a[[i, j]] * b[[j, k]] * c[[k, l]]",
        "a=128x64 b=64x96 c=96x128 o=128x128",
    ),
    ("dot", "s[[]] += x[[i]] * y[[i]]", "x=1048576 y=1048576 s="),
    ("trace", "t[[]] += a[[i, i]]", "a=4096x4096 t="),
    ("diagonal", "d[[i]] = a[[i, i]]", "a=4096x4096 d=4096"),
    ("outer", "o[[i, j]] = a[[i]] * b[[j]]", "a=4096 b=4093 o=4096x4093"),
    (
        "builtins",
        "o[[i, j]] = relu(a[[i, j]]) + gelu(b[[i, j]]) + sigmoid(a[[i, j]]) + tanh(b[[i, j]]) + exp(a[[i, j]]) + sqrt(b[[i, j]] * b[[i, j]] + 1.0) + max(a[[i, j]], b[[i, j]]) - min(a[[i, j]], -b[[i, j]]) / 3.0",
        "a=1024x1000 b=1024x1000 o=1024x1000",
    ),
    (
        "builtins_more",
        "o[[i, j]] = log(abs(a[[i, j]]) + 1.0) + pow(abs(b[[i, j]]), 1.5) + erf(a[[i, j]]) + silu(b[[i, j]]) + rsqrt(a[[i, j]] * a[[i, j]] + 1.0)",
        "a=1024x1000 b=1024x1000 o=1024x1000",
    ),
    (
        "gemv",
        "o[[i]] += a[[i, k]] * b[[k]]",
        "a=4096x4096 b=4096 o=4096",
    ),
    (
        "conv1d_reversed",
        "o[[i]] += a[[i - k + 2]] * w[[k]]; o[[i]] = sigmoid(o[[i]])",
        "a=100000 w=5 o=100000",
    ),
];

/// Half-precision kernels (name, statements, shapes, element types): `unsigned short`
/// storage and the conversions in inline PTX, with no `#include`, must compile too.
const HALF_KERNELS: &[(&str, &str, &str, &str)] = &[
    (
        "matmul_bf16",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=bf16,b=bf16",
    ),
    (
        "matmul_f16",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]; c[[i, j]] = gelu(c[[i, j]])",
        "a=127x131 b=131x137 c=127x137",
        "a=f16,b=f16,c=f16",
    ),
    (
        "conv_bf16_bias_relu",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        "x=8x64x56x56 w=128x64x3x3 bias=128 y=8x128x28x28",
        "x=bf16,w=bf16,y=bf16",
    ),
];

/// Random configurations per kernel (plus the default).
const RANDOM_CONFIGS: usize = 20;

#[derive(Serialize)]
struct Entry {
    kernel: String,
    extents: Vec<usize>,
    config: String,
    default: bool,
    threads: usize,
    blocks: usize,
    accumulators: usize,
    registers: u32,
    spill_stores: u32,
    spill_loads: u32,
    shared_bytes: u32,
    stack_bytes: u32,
    nvrtc_ms: u64,
}

/// Why NVRTC or ptxas cannot be used here, if so.
fn unavailable() -> Option<String> {
    common::nvrtc_unavailable()
}

#[cfg(feature = "cuda")]
fn compile(name: &str, source: &str, target: &GpuTarget) -> Result<(String, u64), String> {
    let start = std::time::Instant::now();
    let ptx = tensor_dsl::runtime::nvrtc::compile_ptx(name, source, &target.virtual_arch())
        .map_err(|e| e.to_string())?;
    Ok((ptx, start.elapsed().as_millis() as u64))
}

#[cfg(not(feature = "cuda"))]
fn compile(_: &str, _: &str, _: &GpuTarget) -> Result<(String, u64), String> {
    Err("the `cuda` feature is off".into())
}

struct Job {
    name: String,
    kernel: Kernel,
    extents: Vec<usize>,
    shapes: Vec<Vec<usize>>,
    config: String,
    default: bool,
    schedule: GpuSchedule,
}

#[test]
fn every_config_compiles_with_nvrtc_and_ptxas() {
    if !common::tools_present(unavailable()) {
        return;
    }
    let target = GpuTarget::h100();
    let mut rng = StdRng::seed_from_u64(90);
    let mut jobs = Vec::new();
    let all = KERNELS
        .iter()
        .map(|&(n, k, s)| (n, k, s, ""))
        .chain(HALF_KERNELS.iter().copied());
    for (name, src, shapes, dtypes) in all {
        let case = common::Case::new(name, src, shapes, dtypes);
        let (kernel, shapes, extents) = (case.kernel.clone(), case.shapes.clone(), case.extents());
        let template = GpuTemplate::new(&kernel, &extents, &target).unwrap();
        let default = template.default_config().unwrap();
        let mut points = vec![default.clone()];
        for _ in 0..RANDOM_CONFIGS {
            points.push(
                template
                    .space()
                    .sample_uniform(&mut rng)
                    .unwrap_or_else(|e| panic!("{name}: {e}")),
            );
        }
        for point in points {
            jobs.push(Job {
                name: name.to_string(),
                kernel: kernel.clone(),
                extents: extents.clone(),
                shapes: shapes.clone(),
                config: template.space().format(&point).unwrap(),
                default: point == default,
                schedule: template.decode(&point).unwrap(),
            });
        }
    }
    let start = std::time::Instant::now();
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let n = {
                    let mut next = next.lock().unwrap();
                    *next += 1;
                    *next - 1
                };
                let Some(job) = jobs.get(n) else {
                    break;
                };
                let refs: Vec<&[usize]> = job.shapes.iter().map(|s| s.as_slice()).collect();
                let src = cuda::generate(&job.kernel, &job.extents, &refs, &job.schedule);
                let outcome = compile(&job.name, &src.source, &target).and_then(|(ptx, ms)| {
                    tensor_dsl::runtime::ptxas::assemble(&ptx, &target.real_arch()).map(|r| (r, ms))
                });
                match outcome {
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{} {}: {e}\n{}", job.name, job.config, src.source)),
                    Ok((r, ms)) => {
                        // The schedule counts every array rounded up to 16 bytes; ptxas does
                        // not round the last one.
                        let want = job.schedule.shared_bytes(&job.kernel);
                        let got = r.shared_bytes as usize;
                        if got > want
                            || got + 16 <= want
                            || r.shared_bytes > target.max_shared_per_block
                        {
                            failures.lock().unwrap().push(format!(
                                "{} {}: ptxas reports {} bytes of shared memory, the schedule \
                                 counts {want} (limit {})",
                                job.name, job.config, r.shared_bytes, target.max_shared_per_block
                            ));
                        }
                        results.lock().unwrap().push(Entry {
                            kernel: job.name.clone(),
                            extents: job.extents.clone(),
                            config: job.config.clone(),
                            default: job.default,
                            threads: job.schedule.threads(&job.kernel),
                            blocks: job.schedule.blocks(&job.kernel),
                            accumulators: job.schedule.accumulators(&job.kernel),
                            registers: r.registers,
                            spill_stores: r.spill_stores,
                            spill_loads: r.spill_loads,
                            shared_bytes: r.shared_bytes,
                            stack_bytes: r.stack_bytes,
                            nvrtc_ms: ms,
                        });
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} configs failed:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n\n")
    );
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| {
        (&a.kernel, !a.default, &a.config).cmp(&(&b.kernel, !b.default, &b.config))
    });
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ptxas-report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    let regs: Vec<u32> = results.iter().map(|r| r.registers).collect();
    let spilled = results.iter().filter(|r| r.spill_stores > 0).count();
    println!(
        "{} configs of {} kernels compiled in {:.1} s; registers {}..{}, {spilled} spill; report: {}",
        results.len(),
        KERNELS.len() + HALF_KERNELS.len(),
        start.elapsed().as_secs_f64(),
        regs.iter().min().unwrap_or(&0),
        regs.iter().max().unwrap_or(&0),
        path.display()
    );
}

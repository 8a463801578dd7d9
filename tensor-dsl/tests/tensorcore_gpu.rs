//! Tensor-core kernels on a real GPU against the reference: the `mma.sync` template (its
//! default, split-K across blocks, random points) everywhere, and on a 9.0 GPU the Hopper
//! template (`wgmma`, staged by `cp.async` and by TMA with the tensor maps the runtime
//! encodes, split-K). Each split-K kernel runs twice, so a counter its last block failed to
//! reset would show in the second result. Without a GPU it prints why and passes (fails
//! under `TENSOR_DSL_REQUIRE_GPU=1`); `bench/gpu/run.sh` runs it.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, SeedableRng};
use tensor_dsl::lower::tensorcore::TcSchedule;
use tensor_dsl::lower::wgmma::WgSchedule;
use tensor_dsl::runtime::cuda;
use tensor_dsl::template::cuda::CudaSchedule;
use tensor_dsl::template::{tensorcore::TcTemplate, wgmma::WgTemplate};
use tensor_dsl::Buffer;

const CASES: &[(&str, &str, &str)] = &[
    (
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=bf16,b=bf16,c=f32",
    ),
    (
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=127x131 b=131x137 c=127x137",
        "a=bf16,b=bf16",
    ),
    (
        "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = relu(o[[i, j]] + bias[[j]])",
        "a=512x768 b=768x3072 bias=3072 o=512x3072",
        "a=bf16,b=bf16,o=bf16",
    ),
    (
        "c[[i, j]] += a[[k, i]] * b[[j, k]]",
        "a=512x768 b=1024x512 c=768x1024",
        "a=f16,b=f16,c=f16",
    ),
    (
        "z[[b, m, n]] += x[[b, m, k]] * y[[b, k, n]]",
        "x=12x512x64 y=12x64x512 z=12x512x512",
        "x=bf16,y=bf16",
    ),
];

#[test]
fn tensor_core_kernels_match_the_reference_on_the_gpu() {
    // Skips without a GPU; fails instead under TENSOR_DSL_REQUIRE_GPU=1 (the GPU recipe).
    let Some(info) =
        tensor_dsl::testing::gpu_info("tensor_core_kernels_match_the_reference_on_the_gpu")
    else {
        return;
    };
    let target = info.target();
    let mut rng = StdRng::seed_from_u64(1);
    let cases: Vec<(common::Case, Vec<Buffer>)> = CASES
        .iter()
        .enumerate()
        .map(|(n, &(src, shapes, dtypes))| {
            let case = common::Case::new(&format!("k{n}"), src, shapes, dtypes);
            let data = common::random_inputs(&case.kernel, &case.shapes, &mut rng);
            (case, data)
        })
        .collect();
    // The reference interpreter takes most of this test's time (1000^3 and 512x3072x768
    // multiply-adds): every case's at once, a thread each.
    let wants: Vec<Vec<f32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(case, data)| {
                scope.spawn(move || {
                    common::reference_output(&case.kernel, &case.extents(), &case.shapes, data)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    for (((case, data), want), &(src, _, dtypes)) in cases.iter().zip(&wants).zip(CASES) {
        let (kernel, extents, refs) = (&case.kernel, case.extents(), case.shape_refs());
        let views: Vec<tensor_dsl::Data> = data.iter().map(Buffer::view).collect();
        let out_dtype = kernel.params[kernel.output].dtype;
        let n_out: usize = case.shapes[kernel.output].iter().product();

        let mut points: Vec<CudaSchedule> = Vec::new();
        if let Ok(t) = TcTemplate::new(kernel, &extents, &refs, &target) {
            let d = t.default_schedule();
            points.push(CudaSchedule::TensorCore(d.clone()));
            let split = TcSchedule { splits: 2, ..d };
            if t.encode(&split).is_ok() {
                points.push(CudaSchedule::TensorCore(split));
            }
            for _ in 0..3 {
                let c = t.space().sample_uniform(&mut rng).unwrap();
                points.push(CudaSchedule::TensorCore(t.decode(&c).unwrap()));
            }
        }
        if let Ok(t) = WgTemplate::new(kernel, &extents, &refs, &target) {
            let d = t.default_schedule();
            for s in [
                d.clone(),
                WgSchedule {
                    tma: true,
                    ..d.clone()
                },
                WgSchedule {
                    splits: 2,
                    ..d.clone()
                },
                WgSchedule {
                    splits: 2,
                    tma: true,
                    ..d
                },
            ] {
                if t.encode(&s).is_ok() {
                    points.push(CudaSchedule::Wgmma(s));
                }
            }
            for _ in 0..3 {
                let c = t.space().sample_uniform(&mut rng).unwrap();
                points.push(CudaSchedule::Wgmma(t.decode(&c).unwrap()));
            }
        }
        for s in &points {
            for run in 0..2 {
                let mut got = Buffer::from_f32(out_dtype, &vec![f32::NAN; n_out]);
                let result = cuda::run_schedule(kernel, &extents, &refs, &views, got.view_mut(), s);
                let error = match result {
                    Err(e) => Some(e.to_string()),
                    Ok(()) => got
                        .to_f32()
                        .iter()
                        .zip(want)
                        .position(|(g, w)| {
                            let tol = common::emulator_tolerance(out_dtype);
                            (g - w).abs() > tol * (1.0 + w.abs()) || g.is_nan()
                        })
                        .map(|e| format!("element {e} differs from the reference")),
                };
                if let Some(e) = error {
                    // Printed at once: a run stopped by a time limit still shows it.
                    let failure = format!("{src} {dtypes} {s:?} (run {run}): {e}");
                    println!("MISMATCH {failure}");
                    failures.push(failure);
                    break;
                }
            }
        }
        println!(
            "{src} {dtypes}: {} points, {} mismatches so far",
            points.len(),
            failures.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

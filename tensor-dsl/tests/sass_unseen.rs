//! The static SASS floor on shapes nobody chose: seeded random convolutions (NCHW and NHWC,
//! 1×1 to 7×7 windows, strides 1–2, with and without zero padding, 3 to 1024 channels) and
//! GEMMs (every operand layout, a batch, bias and activation epilogues). Each default
//! schedule that takes the SIMT GEMM template goes through NVRTC, `ptxas -arch=sm_90` and
//! `nvdisasm` and must not spill and must spend at least 0.85 of its hot loop on FFMA, as the
//! hand-picked workloads of `sass_profile.rs` must. Shapes outside the template (a side
//! under 16, no reduction) must still not spill. Sweeps of this kind found the defaults that
//! were below the floor before (`bench/results/2026-11-26-gpu-static-sweep.md`).
//!
//! The half-precision GEMMs of the same generator (bf16 or f16 inputs, f32 or half
//! outputs) take the tensor-core templates: on `sm_90` (`mma.sync`) and `sm_90a` (`wgmma`
//! for the large ones) their code has no `#include`, assembles, spills nothing and its hot
//! loop issues MMAs.
//!
//! Without NVRTC, `ptxas` or `nvdisasm` the tests print why and pass, unless
//! `TENSOR_DSL_REQUIRE_NVRTC=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use tensor_dsl::codegen::cuda;
use tensor_dsl::ir::{bind, parse_text, Kernel};
use tensor_dsl::runtime::sass;
use tensor_dsl::template::cuda::{self as cuda_space, CudaSchedule};
use tensor_dsl::template::gpu::{default_schedule, GpuTarget};

const MIN_FFMA_SHARE: f64 = 0.85;
const CONVOLUTIONS: usize = 16;
const GEMMS: usize = 12;

/// A case: statements, and the tensors' shapes in parameter order (output last).
type Case = (String, Vec<(String, Vec<usize>)>);

/// A random convolution.
fn convolution(rng: &mut StdRng) -> Option<Case> {
    let n = *[1, 2, 4, 8, 16].choose(rng)?;
    let c = *[3, 8, 16, 24, 32, 64, 96, 128, 256, 512, 1024].choose(rng)?;
    let f = *[16, 32, 48, 64, 96, 128, 256, 512, 1000].choose(rng)?;
    let h: usize = *[7, 13, 14, 17, 28, 31, 35, 56].choose(rng)?;
    let r: usize = *[1, 1, 3, 3, 3, 5, 7].choose(rng)?;
    let stride = *[1, 1, 2].choose(rng)?;
    let pad = if rng.gen_bool(0.5) { r / 2 } else { 0 };
    let p = (h + 2 * pad).checked_sub(r)? / stride + 1;
    let at = |o: &str, w: &str| {
        let o = if stride > 1 {
            format!("{stride} * {o}")
        } else {
            o.to_string()
        };
        if pad > 0 {
            format!("{o} + {w} - {pad}")
        } else {
            format!("{o} + {w}")
        }
    };
    let shape = |name: &str, dims: [usize; 4]| (name.to_string(), dims.to_vec());
    Some(if rng.gen_bool(0.35) {
        (
            format!(
                "y[[n, p, q, f]] += x[[n, {}, {}, c]] * w[[r, s, c, f]]",
                at("p", "r"),
                at("q", "s")
            ),
            vec![
                shape("x", [n, h, h, c]),
                shape("w", [r, r, c, f]),
                shape("y", [n, p, p, f]),
            ],
        )
    } else {
        (
            format!(
                "y[[n, f, p, q]] += x[[n, c, {}, {}]] * w[[f, c, r, s]]",
                at("p", "r"),
                at("q", "s")
            ),
            vec![
                shape("x", [n, c, h, h]),
                shape("w", [f, c, r, r]),
                shape("y", [n, f, p, p]),
            ],
        )
    })
}

/// A random GEMM, batched or not, in any operand layout, maybe with an epilogue.
fn gemm(rng: &mut StdRng) -> Option<Case> {
    let sizes = [
        16, 17, 31, 32, 33, 48, 64, 100, 127, 128, 255, 384, 512, 768, 1000, 1024, 2048, 3072,
    ];
    let (m, n, k) = (
        *sizes.choose(rng)?,
        *sizes.choose(rng)?,
        *sizes.choose(rng)?,
    );
    let batch = rng
        .gen_bool(0.25)
        .then(|| *[2usize, 3, 12].choose(rng).unwrap_or(&2));
    let (ta, tb) = (rng.gen_bool(0.5), rng.gen_bool(0.5));
    let z = if batch.is_some() { "z, " } else { "" };
    let a = if ta {
        format!("a[[{z}k, i]]")
    } else {
        format!("a[[{z}i, k]]")
    };
    let b = if tb {
        format!("b[[{z}j, k]]")
    } else {
        format!("b[[{z}k, j]]")
    };
    let out = format!("c[[{z}i, j]]");
    let mut src = format!("{out} += {a} * {b}");
    let with_batch = |mut d: Vec<usize>| {
        if let Some(bs) = batch {
            d.insert(0, bs);
        }
        d
    };
    let mut shapes = vec![
        (
            "a".to_string(),
            with_batch(if ta { vec![k, m] } else { vec![m, k] }),
        ),
        (
            "b".to_string(),
            with_batch(if tb { vec![n, k] } else { vec![k, n] }),
        ),
    ];
    match rng.gen_range(0..4) {
        0 => {}
        1 => {
            src += &format!("; {out} = relu({out} + bias[[j]])");
            shapes.push(("bias".into(), vec![n]));
        }
        2 => {
            src += &format!("; {out} = gelu({out} + bias[[j]])");
            shapes.push(("bias".into(), vec![n]));
        }
        _ => src += &format!("; {out} = sigmoid({out}) * 2.0"),
    }
    shapes.push(("c".into(), with_batch(vec![m, n])));
    Some((src, shapes))
}

/// `src` parsed with its parameters declared (the last one the output), and its extents.
fn kernel_of(src: &str, named: &[(String, Vec<usize>)], dtypes: &str) -> (Kernel, Vec<usize>) {
    let decl: Vec<(String, bool)> = named
        .iter()
        .enumerate()
        .map(|(i, (t, _))| (t.clone(), i + 1 == named.len()))
        .collect();
    let kernel = parse_text("unseen", src, Some(&decl))
        .unwrap()
        .with_dtypes(dtypes)
        .unwrap();
    let dims: Vec<&[usize]> = named.iter().map(|(_, d)| d.as_slice()).collect();
    let extents = bind(&kernel, &dims).unwrap_or_else(|e| panic!("{src} {named:?}: {e}"));
    (kernel, extents)
}

#[test]
fn unseen_defaults_do_not_spill_and_hold_the_ffma_floor() {
    if !common::sass_tools_present() {
        return;
    }
    let target = GpuTarget::h100();
    let mut rng = StdRng::seed_from_u64(20_261_126);
    let mut cases = Vec::new();
    while cases.len() < CONVOLUTIONS {
        cases.extend(convolution(&mut rng));
    }
    while cases.len() < CONVOLUTIONS + GEMMS {
        cases.extend(gemm(&mut rng));
    }
    let (mut failures, mut simt) = (Vec::new(), 0);
    for (src, named) in &cases {
        let (kernel, extents) = kernel_of(src, named, "");
        let dims: Vec<&[usize]> = named.iter().map(|(_, d)| d.as_slice()).collect();
        let schedule = default_schedule(&kernel, &extents, &target);
        let source = cuda::generate(&kernel, &extents, &dims, &schedule);
        let profile = sass::profile_cuda(&source, &target)
            .unwrap_or_else(|e| panic!("{src} {named:?}: {e}\n{}", source.source));
        let share = profile.ffma_share();
        let sgemm = schedule.simt.is_some();
        simt += usize::from(sgemm);
        println!(
            "{src} {named:?}: {}, {} registers, FFMA share {share:.3}",
            if sgemm { "SIMT GEMM" } else { "other" },
            profile.ptxas.registers
        );
        if profile.spills() > 0 || profile.ptxas.stack_bytes > 0 {
            failures.push(format!("{src} {named:?} spills ({:?})", profile.ptxas));
        }
        if sgemm && share < MIN_FFMA_SHARE {
            failures.push(format!(
                "{src} {named:?}: hot-loop FFMA share {share:.3} < {MIN_FFMA_SHARE}"
            ));
        }
    }
    // The sweep is about the SIMT GEMM template: most cases must reach it.
    assert!(
        simt * 4 >= cases.len() * 3,
        "only {simt} of {} SIMT GEMMs",
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn unseen_half_precision_gemms_issue_tensor_core_mmas_without_spills() {
    if !common::sass_tools_present() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(13);
    let mut failures = Vec::new();
    let mut n = 0;
    while n < 12 {
        let Some((src, named)) = gemm(&mut rng) else {
            continue;
        };
        n += 1;
        let half = *["bf16", "f16"].choose(&mut rng).unwrap_or(&"bf16");
        let out = if rng.gen_bool(0.5) { half } else { "f32" };
        let dtypes = format!("a={half},b={half},c={out}");
        let (kernel, extents) = kernel_of(&src, &named, &dtypes);
        let dims: Vec<&[usize]> = named.iter().map(|(_, d)| d.as_slice()).collect();
        for target in [GpuTarget::h100(), GpuTarget::h100_sm90a()] {
            let schedule = cuda_space::default_schedule(&kernel, &extents, &target);
            let what = match &schedule {
                CudaSchedule::Simt(_) => "SIMT",
                CudaSchedule::TensorCore(_) => "mma.sync",
                CudaSchedule::Wgmma(_) => "wgmma",
            };
            let source = cuda_space::generate(&kernel, &extents, &dims, &schedule);
            let case = format!("{src} {named:?} {dtypes} {}: {what}", target.real_arch());
            if source.source.contains("#include") {
                failures.push(format!("{case}: #include"));
            }
            let profile = match sass::profile_cuda(&source, &target) {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("{case}: {e}"));
                    continue;
                }
            };
            // A reduction of one MMA step (k <= 16) has no loop: its whole kernel counts.
            let k = kernel
                .indices
                .iter()
                .position(|i| i.name == "k")
                .map_or(0, |i| extents[i]);
            let mma = if k <= 16 {
                profile.kernel_mix.mma
            } else {
                profile.hot_loop.as_ref().map_or(0, |h| h.mix.mma)
            };
            println!(
                "{case}, {} registers, {mma} MMAs in the hot loop",
                profile.ptxas.registers
            );
            if profile.spills() > 0 || profile.ptxas.stack_bytes > 0 {
                failures.push(format!("{case}: spills ({:?})", profile.ptxas));
            }
            if what == "SIMT" {
                failures.push(format!("{case}: not a tensor-core template"));
            } else if mma == 0 {
                failures.push(format!("{case}: no MMA in the hot loop"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

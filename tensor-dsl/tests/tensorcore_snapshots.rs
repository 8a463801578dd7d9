//! Snapshots of the tensor-core CUDA C (default schedule, H100): a bf16 GEMM with unaligned
//! extents (2-byte loads), an aligned f16 one with transposed operands (`cp.async`,
//! `ldmatrix.trans`), a fused bias + ReLU epilogue and an implicit-GEMM convolution. Review a diff like any other
//! (`INSTA_UPDATE=always`, then `git diff`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tensor_dsl::codegen::{tensorcore, wgmma};
use tensor_dsl::lower::wgmma::WgSchedule;
use tensor_dsl::template::{gpu::GpuTarget, tensorcore::TcTemplate, wgmma::WgTemplate};

const CASES: &[(&str, &str, &str, &str)] = &[
    (
        "matmul_bf16_unaligned",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=67x93 b=93x45 c=67x45",
        "a=bf16,b=bf16",
    ),
    (
        "matmul_f16_nt",
        "c[[i, j]] += a[[k, i]] * b[[j, k]]",
        "a=512x768 b=1024x512 c=768x1024",
        "a=f16,b=f16,c=f16",
    ),
    (
        "gemm_bias_relu_bf16",
        "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = relu(o[[i, j]] + bias[[j]])",
        "a=512x768 b=768x3072 bias=3072 o=512x3072",
        "a=bf16,b=bf16,o=bf16",
    ),
    (
        "conv_bias_relu_bf16",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        "x=8x64x56x56 w=128x64x3x3 bias=128 y=8x128x28x28",
        "x=bf16,w=bf16,y=bf16",
    ),
];

#[test]
fn generated_tensor_core_cuda() {
    let target = GpuTarget::h100();
    for &(name, src, shapes, dtypes) in CASES {
        let case = common::Case::new(name, src, shapes, dtypes);
        let (shapes, extents) = (case.shape_refs(), case.extents());
        let t = TcTemplate::new(&case.kernel, &extents, &shapes, &target).unwrap();
        let s = t.default_schedule();
        let point = t.encode(&s).unwrap();
        let gen = tensorcore::generate(&case.kernel, &extents, &shapes, &s);
        let text = format!(
            "// grid {:?} block {:?} config {}\n{}",
            gen.grid,
            gen.block,
            t.space().format(&point).unwrap(),
            gen.source
        );
        insta::assert_snapshot!(format!("tensorcore_{name}"), text);
    }
}

/// Snapshots of the Hopper wgmma CUDA C (default schedule, sm_90a): a 1000³ bf16 GEMM (A
/// K-major, B N-major: the descriptors' transpose), staged by `cp.async` and by TMA, and an
/// f16 one with both operands transposed and a fused bias + ReLU.
#[test]
fn generated_wgmma_cuda() {
    let target = GpuTarget::h100_sm90a();
    let mm = "c[[i, j]] += a[[i, k]] * b[[k, j]]";
    for &(name, src, shapes, dtypes, tma) in &[
        (
            "matmul_bf16_1000",
            mm,
            "a=1000x1000 b=1000x1000 c=1000x1000",
            "a=bf16,b=bf16,c=f32",
            false,
        ),
        (
            "matmul_bf16_1000_tma",
            mm,
            "a=1000x1000 b=1000x1000 c=1000x1000",
            "a=bf16,b=bf16,c=f32",
            true,
        ),
        (
            "matmul_f16_tn_bias_relu",
            "c[[i, j]] += a[[k, i]] * b[[j, k]]; c[[i, j]] = relu(c[[i, j]] + bias[[j]])",
            "a=512x768 b=1024x512 bias=1024 c=768x1024",
            "a=f16,b=f16,c=f16",
            false,
        ),
    ] {
        let case = common::Case::new(name, src, shapes, dtypes);
        let (shapes, extents) = (case.shape_refs(), case.extents());
        let t = WgTemplate::new(&case.kernel, &extents, &shapes, &target).unwrap();
        let s = WgSchedule {
            tma,
            ..t.default_schedule()
        };
        let point = t.encode(&s).unwrap();
        let gen = wgmma::generate(&case.kernel, &extents, &shapes, &s);
        let text = format!(
            "// grid {:?} block {:?} dynamic shared {} config {}\n// tensor maps {:?}\n{}",
            gen.grid,
            gen.block,
            gen.shared_bytes,
            t.space().format(&point).unwrap(),
            gen.tensor_maps,
            gen.source
        );
        insta::assert_snapshot!(format!("wgmma_{name}"), text);
    }
}

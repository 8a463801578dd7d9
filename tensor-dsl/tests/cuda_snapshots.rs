//! Snapshots of the CUDA C generated with the default GPU schedule (H100), one per kernel
//! case in `tests/kernels/`. A diff here is a change in generated code: review it like any
//! other diff (`cargo insta review`, or `INSTA_UPDATE=always` then `git diff`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tensor_dsl::codegen::cuda;
use tensor_dsl::template::gpu::{default_schedule, GpuTarget, GpuTemplate};

/// Cases for the GPU generator's other paths (reduction lanes within and beyond a warp, a
/// halo with a negative coefficient, vector loads, a diagonal, every built-in), kept here
/// rather than in `tests/kernels/` so the C snapshots do not change with them.
const GPU_CASES: &[(&str, &str, &str)] = &[
    (
        "gemv",
        "o[[i]] += a[[i, k]] * b[[k]]",
        "a=64x4096 b=4096 o=64",
    ),
    (
        "conv1d_reversed",
        "o[[i]] += a[[i - k + 2]] * w[[k]]; o[[i]] = sigmoid(o[[i]])",
        "a=1000 w=5 o=1000",
    ),
    ("diagonal", "d[[i]] = a[[i, i]]", "a=300x300 d=300"),
    (
        "builtins",
        "o[[i, j]] = relu(a[[i, j]]) + gelu(b[[i, j]]) + sigmoid(a[[i, j]]) + tanh(b[[i, j]]) + exp(a[[i, j]]) + sqrt(b[[i, j]] * b[[i, j]] + 1.0) + max(a[[i, j]], b[[i, j]]) - min(a[[i, j]], -b[[i, j]]) / 3.0",
        "a=1024x1000 b=1024x1000 o=1024x1000",
    ),
    (
        "matmul_large",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1024x1024 b=1024x1024 c=1024x1024",
    ),
    // The SIMT GEMM template's paths: split-K with float4 loads, the fused reduction's
    // table (a 7x7 first layer), an NHWC convolution split over its r, s iterations.
    (
        "simt_split_k",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=512x1024 b=1024x64 c=512x64",
    ),
    (
        "simt_conv7x7_fused",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        "x=1x3x224x224 w=64x3x7x7 bias=64 y=1x64x112x112",
    ),
    (
        "simt_conv3x3_nhwc",
        "y[[n, p, q, f]] += x[[n, p + r - 1, q + s - 1, c]] * w[[r, s, c, f]]",
        "x=1x7x7x512 w=3x3x512x512 y=1x7x7x512",
    ),
];

fn load_cases() -> Vec<common::Case> {
    common::kernel_cases()
        .into_iter()
        .chain(
            GPU_CASES
                .iter()
                .map(|&(name, kernel, shapes)| common::Case::new(name, kernel, shapes, "")),
        )
        .collect()
}

#[test]
fn generated_cuda() {
    let cases = load_cases();
    assert!(cases.len() >= 8 + GPU_CASES.len());
    let target = GpuTarget::h100();
    for case in cases {
        let (kernel, shapes, extents) = (&case.kernel, case.shape_refs(), case.extents());
        let schedule = default_schedule(kernel, &extents, &target);
        // The default is a point of the space.
        let template = GpuTemplate::new(kernel, &extents, &target).unwrap();
        let config = template.default_config().unwrap();
        assert_eq!(template.decode(&config).unwrap(), schedule, "{}", case.name);
        let src = cuda::generate(kernel, &extents, &shapes, &schedule);
        let text = format!(
            "// grid {:?} block {:?} config {}\n{}",
            src.grid,
            src.block,
            template.space().format(&config).unwrap(),
            src.source
        );
        insta::assert_snapshot!(format!("cuda_{}", case.name), text);
    }
}

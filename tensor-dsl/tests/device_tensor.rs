//! Device-resident tensors (`tensor_dsl::DeviceTensor`, the generated `name::device` and
//! `device_tensor::call`).
//!
//! Without a GPU every constructor says why (the detection's reason, or the missing `cuda`
//! feature) and shape overflow is still a shape error (and with `TENSOR_DSL_REQUIRE_GPU=1`
//! the test fails). With a GPU: kernels on awkward shapes
//! match the reference interpreter, two kernels chain on the device with no host copy in
//! between, and shape and arity errors are errors before anything is launched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tensor_dsl::device_tensor::call;
use tensor_dsl::{tensor_kernel, Device, DeviceTensor, Error, Options, Tensor};

#[tensor_kernel]
fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

#[tensor_kernel]
fn conv_bias_relu(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]];
    y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);
}

fn random(shape: &[usize], seed: u64) -> Tensor<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), data).unwrap()
}

fn close(got: &Tensor<f32>, want: &Tensor<f32>) {
    assert_eq!(got.shape(), want.shape());
    for (n, (g, w)) in got.as_slice().iter().zip(want.as_slice()).enumerate() {
        assert!(
            (g - w).abs() <= 1e-3 * w.abs().max(1.0),
            "element {n}: {g} vs {w}"
        );
    }
}

#[test]
fn device_tensors_run_on_the_gpu_or_say_why_not() {
    let a = random(&[3, 5], 1);
    let reason = match Device::Cuda.availability() {
        Err(reason) => reason,
        Ok(()) => return on_a_gpu(),
    };
    // No GPU: the checks below run; with TENSOR_DSL_REQUIRE_GPU=1 that is a failure.
    tensor_dsl::testing::gpu("device_tensors_run_on_the_gpu_or_say_why_not");
    for r in [
        DeviceTensor::from_host(&a),
        DeviceTensor::<f32>::zeros(&[3, 5]),
    ] {
        match r {
            Err(Error::DeviceUnavailable { device, reason: r }) => {
                assert_eq!(device, "cuda");
                assert_eq!(r, reason);
            }
            other => panic!("expected DeviceUnavailable, got {other:?}"),
        }
    }
    assert!(matches!(
        DeviceTensor::<f32>::zeros(&[usize::MAX, 3]),
        Err(Error::ShapeOverflow { .. })
    ));
}

fn on_a_gpu() {
    let reference = Options::new().device(Device::Reference);
    // An awkward matmul.
    let (a, b) = (random(&[37, 129], 2), random(&[129, 61], 3));
    let mut want = Tensor::zeros(&[37, 61]);
    matmul::with(&reference)(&a, &b, &mut want).unwrap();
    let (da, db) = (
        DeviceTensor::from_host(&a).unwrap(),
        DeviceTensor::from_host(&b).unwrap(),
    );
    let mut dc = DeviceTensor::<f32>::zeros(&[37, 61]).unwrap();
    call(matmul::kernel(), &[&da, &db], &mut dc).unwrap();
    close(&dc.to_host().unwrap(), &want);

    // Chained on the device: (a·b)·d, no host copy of a·b.
    let d = random(&[61, 7], 4);
    let dd = DeviceTensor::from_host(&d).unwrap();
    let mut de = DeviceTensor::<f32>::zeros(&[37, 7]).unwrap();
    matmul::device(&dc, &dd, &mut de).unwrap();
    let mut want_e = Tensor::zeros(&[37, 7]);
    matmul::with(&reference)(&want, &d, &mut want_e).unwrap();
    close(&de.to_host().unwrap(), &want_e);

    // A padded, strided convolution with a fused epilogue.
    let (x, w, bias) = (
        random(&[2, 5, 13, 11], 5),
        random(&[6, 5, 3, 3], 6),
        random(&[6], 7),
    );
    let mut want_y = Tensor::zeros(&[2, 6, 7, 6]);
    conv_bias_relu::with(&reference)(&x, &w, &bias, &mut want_y).unwrap();
    let dx = DeviceTensor::from_host(&x).unwrap();
    let dw = DeviceTensor::from_host(&w).unwrap();
    let dbias = DeviceTensor::from_host(&bias).unwrap();
    let mut dy = DeviceTensor::<f32>::zeros(&[2, 6, 7, 6]).unwrap();
    conv_bias_relu::device(&dx, &dw, &dbias, &mut dy).unwrap();
    close(&dy.to_host().unwrap(), &want_y);

    // Errors before any launch.
    let mut wrong = DeviceTensor::<f32>::zeros(&[37, 60]).unwrap();
    assert!(matches!(
        call(matmul::kernel(), &[&da, &db], &mut wrong),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        call(matmul::kernel(), &[&da], &mut dc),
        Err(Error::Shape(_))
    ));
    let mut host = Tensor::zeros(&[2, 2]);
    assert!(dc.copy_to(&mut host).is_err());
}

/// `TENSOR_DSL_REQUIRE_GPU=1` (the GPU recipe sets it) turns the skip above into a failure:
/// this test binary, re-run with it, fails where there is no GPU.
#[test]
fn require_gpu_turns_a_skip_into_a_failure() {
    if Device::Cuda.availability().is_ok()
        || std::env::var_os(tensor_dsl::testing::REQUIRE_GPU).is_some()
    {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "device_tensors_run_on_the_gpu_or_say_why_not",
            "--test-threads=1",
        ])
        .env(tensor_dsl::testing::REQUIRE_GPU, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("TENSOR_DSL_REQUIRE_GPU=1 but"), "{text}");
}

//! `TENSOR_DSL_DEVICE` selects the device; bad values and unavailable devices are errors.
//! Its own test binary because it changes the process environment.
#![allow(clippy::unwrap_used)]

use tensor_dsl::{tensor_kernel, Device, Error, Tensor};

#[tensor_kernel]
fn scale(a: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i]] = a[[i]] * 2.0;
}

#[test]
fn device_from_environment() {
    let a = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap();
    let mut c = Tensor::zeros(&[2]);
    // CUDA runs where there is a GPU; elsewhere it is `DeviceUnavailable`.
    let cuda = Device::Cuda.availability().is_ok();
    for (value, ok) in [
        ("cpu", true),
        ("reference", true),
        ("", true),
        ("cuda", cuda),
        ("GPU", cuda),
        ("tpu", false),
    ] {
        std::env::set_var("TENSOR_DSL_DEVICE", value);
        let r = scale(&a, &mut c);
        assert_eq!(r.is_ok(), ok, "TENSOR_DSL_DEVICE={value}: {r:?}");
        match (value, r) {
            ("tpu", Err(e)) => assert!(matches!(e, Error::InvalidSetting { .. })),
            ("cuda" | "GPU", Err(e)) => assert!(matches!(e, Error::DeviceUnavailable { .. })),
            (_, Ok(())) => assert_eq!(c.as_slice(), &[2.0, 4.0]),
            (_, Err(e)) => panic!("{e}"),
        }
    }
    std::env::remove_var("TENSOR_DSL_DEVICE");
}

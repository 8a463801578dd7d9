//! With no C compiler the CPU device falls back to the reference interpreter (with one
//! warning) instead of failing. Its own test binary: the compiler is probed once per process.
#![allow(clippy::unwrap_used)]

use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn add(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i]] = a[[i]] + b[[i]];
}

#[test]
fn falls_back_to_the_reference_interpreter() {
    // Safe: this binary has a single test, so no other thread reads the environment.
    std::env::set_var("CC", "/nonexistent/tensor-dsl-test-cc");
    assert!(tensor_dsl::runtime::cpu::compiler().is_err());
    let a = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let b = Tensor::from_vec(vec![3], vec![10.0f32, 20.0, 30.0]).unwrap();
    let mut c = Tensor::zeros(&[3]);
    add::with(&Options::new().device(Device::Cpu))(&a, &b, &mut c).unwrap();
    assert_eq!(c.as_slice(), &[11.0, 22.0, 33.0]);
}

//! Helpers shared by the end-to-end tests.
#![allow(dead_code, clippy::unwrap_used)]

use rand::{rngs::StdRng, Rng};
use tensor_dsl::Tensor;

/// A tensor of `shape` with elements uniform in [-1, 1).
pub fn random(rng: &mut StdRng, shape: &[usize]) -> Tensor<f32> {
    let n = shape.iter().product();
    Tensor::from_vec(
        shape.to_vec(),
        (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect(),
    )
    .unwrap()
}

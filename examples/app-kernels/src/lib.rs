//! The example application's kernels. A crate of their own, so the application's build
//! script can depend on them (as a build-dependency) and tune them at `cargo build`.
use tensor_dsl::{tensor_kernel, Tensor};

/// A dense layer: y = relu(x · w + b).
#[tensor_kernel]
pub fn dense_relu(x: &Tensor<f32>, w: &Tensor<f32>, b: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i, j]] += x[[i, k]] * w[[k, j]];
    y[[i, j]] = relu(y[[i, j]] + b[[j]]);
}

/// Row sums of squares.
#[tensor_kernel]
pub fn row_norms(x: &Tensor<f32>, n: &mut Tensor<f32>) {
    n[[i]] += x[[i, k]] * x[[i, k]];
}

/// The shapes the application uses, shared by `build.rs` and `main.rs`.
pub mod shapes {
    pub const BATCH: usize = 128;
    pub const IN: usize = 256;
    pub const OUT: usize = 96;
}

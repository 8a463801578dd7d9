use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i, j]] = max(x[[i, j]]);
}

fn main() {}

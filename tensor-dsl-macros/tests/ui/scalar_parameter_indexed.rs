use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn scale(alpha: f32, x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = alpha[[i]] * x[[i]];
}

fn main() {}

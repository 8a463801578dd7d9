use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn pool(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 1..=3;
    y[[i]] = max(x[[i + r]]);
}

fn main() {}

use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    y[[i]] += exp(x[[i, j]] - m[[i]]);
}

fn main() {}

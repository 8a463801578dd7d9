use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn softmax(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    m[[i]] = max(x[[i, j]]);
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

fn main() {}

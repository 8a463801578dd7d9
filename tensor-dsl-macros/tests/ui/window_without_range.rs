use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn pool(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]]);
}

fn main() {}

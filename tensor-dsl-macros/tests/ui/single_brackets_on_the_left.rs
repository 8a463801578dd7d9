use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn k(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[i, j] += a[[i, k]] * b[[k, j]];
}

fn main() {}

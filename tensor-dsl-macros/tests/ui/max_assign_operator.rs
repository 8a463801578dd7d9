use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn row_max(x: &Tensor<f32>, m: &mut Tensor<f32>) {
    m[[i]] max= x[[i, j]];
}

fn main() {}

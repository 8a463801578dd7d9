use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn k(a: &Tensor<f32>, c: &mut Tensor<f32>) {
    a[[i]] = c[[i]];
}

fn main() {}

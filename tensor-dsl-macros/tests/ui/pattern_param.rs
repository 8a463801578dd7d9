use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn k((a, b): (&Tensor<f32>, &Tensor<f32>), c: &mut Tensor<f32>) {
    c[[i]] = a[[i]] + b[[i]];
}

fn main() {}

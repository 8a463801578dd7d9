use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn k(a: &Tensor<f64>, b: Vec<f32>, c: &mut Tensor<f32>) {
    c[[i]] = foo(a[[i]]) + b[[i * i]];
}

fn main() {}

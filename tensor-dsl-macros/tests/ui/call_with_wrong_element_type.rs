use tensor_dsl::{bf16, tensor_kernel, Tensor};

#[tensor_kernel]
fn linear(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

fn main() {
    let a = Tensor::<f32>::zeros(&[2, 2]);
    let b = Tensor::<bf16>::zeros(&[2, 2]);
    let mut c = Tensor::<f32>::zeros(&[2, 2]);
    let _ = linear(&a, &b, &mut c);
}

use tensor_dsl::{tensor_kernel, Tensor};

// `j` is reduced by `m` but the elementwise output keeps reading it through `m[[j]]`.
#[tensor_kernel]
fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    y[[i, j]] = x[[i, j]] - m[[j]];
}

fn main() {}

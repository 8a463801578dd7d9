use tensor_dsl::{f16, tensor_kernel, Tensor};

#[tensor_kernel]
pub fn softmax(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

#[tensor_kernel]
pub fn layer_norm(x: &Tensor<f16>, gamma: &Tensor<f32>, beta: &Tensor<f32>, y: &mut Tensor<f16>) {
    mu[[i]] = mean(x[[i, j]]);
    var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]]));
    y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 1e-5) * gamma[[j]] + beta[[j]];
}

#[tensor_kernel]
pub fn max_pool(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..3;
    let s = 0..3;
    y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]]);
}

/// The first thing a new user tries (it used to be rejected).
#[tensor_kernel]
fn row_max(x: &Tensor<f32>, m: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
}

fn main() {
    assert!(row_max::kernel().is_staged());
    assert_eq!(softmax::kernel().stages().len(), 2);
    assert!(layer_norm::kernel().is_staged());
    assert!(max_pool::kernel().is_staged());
}

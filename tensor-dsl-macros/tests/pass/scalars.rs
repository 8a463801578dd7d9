//! Scalar parameters: read by name in the body, passed by value at the call.
use tensor_dsl::{bf16, tensor_kernel, Device, Options, Tensor};

/// y = alpha * x + beta (BLAS-style scaling)
#[tensor_kernel]
fn axpb(alpha: f32, x: &Tensor<f32>, beta: f32, y: &mut Tensor<f32>) {
    y[[i]] = alpha * x[[i]] + beta;
}

/// c = alpha * a . b, then a leaky ReLU with a half-precision slope.
#[tensor_kernel]
fn scaled_mm(a: &Tensor<f32>, b: &Tensor<f32>, alpha: f32, slope: bf16, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
    c[[i, j]] = max(alpha * c[[i, j]], slope[[]] * alpha * c[[i, j]]);
}

fn main() -> Result<(), tensor_dsl::Error> {
    let x = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0])?;
    let mut y = Tensor::<f32>::zeros(&[3]);
    axpb(2.0, &x, 0.5, &mut y)?;
    assert_eq!(y.as_slice(), &[2.5, 4.5, 6.5]);
    axpb::with(&Options::new().device(Device::Reference))(3.0, &x, 1.0, &mut y)?;
    assert_eq!(y.as_slice(), &[4.0, 7.0, 10.0]);
    let data = [1.0f32, 1.0, 1.0];
    let mut out = [0.0f32; 3];
    axpb::views(
        -1.0,
        tensor_dsl::TensorView::new(&[3], &data)?,
        0.0,
        tensor_dsl::TensorViewMut::new(&[3], &mut out)?,
    )?;
    assert_eq!(out, [-1.0; 3]);
    assert_eq!(axpb::kernel().params[0].rank, 0);

    let a = Tensor::from_vec(vec![1, 2], vec![1.0f32, -2.0])?;
    let b = Tensor::from_vec(vec![2, 2], vec![1.0f32, 0.0, 0.0, 1.0])?;
    let mut c = Tensor::<f32>::zeros(&[1, 2]);
    scaled_mm(&a, &b, 2.0, bf16::from_f32(0.5), &mut c)?;
    assert_eq!(c.as_slice(), &[2.0, -2.0]);
    Ok(())
}

//! Signatures and names the macro must accept, with strict lints on the generated code.
#![deny(missing_docs, unused, clippy::all)]

use tensor_dsl::{bf16, tensor_kernel, Device, Options, Tensor};

/// Output first, a qualified tensor type, and parameters named like the generated items.
#[tensor_kernel]
pub fn kernel(
    opts: &mut Tensor<f32>,
    kernel: &tensor_dsl::Tensor<f32>,
    with: &::tensor_dsl::Tensor<f32>,
) {
    opts[[i, j]] += kernel[[i, k]] * with[[k, j]];
}

/// Restricted visibility.
#[tensor_kernel]
pub(crate) fn scale(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = 2.0 * x[[i]];
    y[[i]] = max(y[[i]], 0.5);
}

/// No inputs at all, and a `cfg` (which must apply to the companion module too).
#[tensor_kernel]
#[cfg(not(any()))]
fn one(out: &mut Tensor<f32>) {
    out[[]] = 1.0;
}

/// A raw identifier as the name.
#[tensor_kernel]
fn r#match(a: &Tensor<f32>, b: &Tensor<f32>, c: &Tensor<f32>, d: &mut Tensor<f32>) {
    d[[]] += a[[i]] * b[[i, j]] * c[[j]];
}

mod inner {
    use tensor_dsl::{tensor_kernel, Tensor};

    /// Visible to the parent only.
    #[tensor_kernel]
    pub(super) fn transpose(a: &Tensor<f32>, t: &mut Tensor<f32>) {
        t[[j, i]] = a[[i, j]];
    }
}

/// Element types per parameter, written plainly, through the facade and through `half`.
#[tensor_kernel]
pub fn mixed(
    a: &Tensor<tensor_dsl::bf16>,
    b: &Tensor<bf16>,
    bias: &Tensor<f32>,
    c: &mut Tensor<tensor_dsl::f16>,
) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
    c[[i, j]] = c[[i, j]] + bias[[j]];
}

type KernelFn3 = fn(&Tensor<f32>, &Tensor<f32>, &mut Tensor<f32>) -> Result<(), tensor_dsl::Error>;

fn main() -> Result<(), tensor_dsl::Error> {
    /// Defined inside a function body.
    #[tensor_kernel]
    fn local_add(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
        c[[i, j]] = a[[i, j]] + b[[i, j]];
    }

    let reference = Options::new().device(Device::Reference);
    let a = Tensor::from_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, 4.0])?;
    let i = Tensor::from_vec(vec![2, 2], vec![1.0f32, 0.0, 0.0, 1.0])?;
    let mut c = Tensor::<f32>::zeros(&[2, 2]);
    kernel::with(&reference)(&mut c, &a, &i)?;
    assert_eq!(c.as_slice(), a.as_slice());
    assert_eq!(kernel::kernel().name, "kernel");

    let x = Tensor::from_vec(vec![3], vec![0.0f32, 1.0, 2.0])?;
    let mut y = Tensor::<f32>::zeros(&[3]);
    scale::with(&reference)(&x, &mut y)?;
    assert_eq!(y.as_slice(), &[0.5, 2.0, 4.0]);

    let mut s = Tensor::<f32>::zeros(&[]);
    one::with(&reference)(&mut s)?;
    assert_eq!(s.as_slice(), &[1.0]);
    assert!(one::kernel().inputs().is_empty());

    assert_eq!(r#match::kernel().name, "match");
    let mut t = Tensor::<f32>::zeros(&[2, 2]);
    inner::transpose::with(&reference)(&a, &mut t)?;
    assert_eq!(t.as_slice(), &[1.0, 3.0, 2.0, 4.0]);

    let h = Tensor::<bf16>::from_f32(vec![2, 2], &[1.0, 2.0, 3.0, 4.0])?;
    let eye = Tensor::<bf16>::from_f32(vec![2, 2], &[1.0, 0.0, 0.0, 1.0])?;
    let bias = Tensor::from_vec(vec![2], vec![0.5f32, -0.5])?;
    let mut m = Tensor::<tensor_dsl::f16>::zeros(&[2, 2]);
    mixed::with(&reference)(&h, &eye, &bias, &mut m)?;
    assert_eq!(m.to_f32(), vec![1.5, 1.5, 3.5, 3.5]);

    local_add::with(&reference)(&a, &a, &mut t)?;
    assert_eq!(t.as_slice(), &[2.0, 4.0, 6.0, 8.0]);

    // The generated functions have the documented types (not called: the default device
    // depends on the machine).
    let _: KernelFn3 = local_add;
    let _: fn(&Tensor<f32>, &mut Tensor<f32>) -> Result<(), tensor_dsl::Error> = scale;
    let _ = (one, r#match, inner::transpose, kernel);
    Ok(())
}

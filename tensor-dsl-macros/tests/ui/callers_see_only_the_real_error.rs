// A broken kernel still defines `k`, `k::kernel()` and `k::with(..)` with the right types,
// so the code that uses them does not add errors of its own.
use tensor_dsl::{tensor_kernel, Options, Tensor};

#[tensor_kernel]
pub fn k(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]] * b[[j]];
}

#[tensor_kernel]
pub fn bad_param(a: &Tensor<f64>, c: &mut Tensor<f32>) {
    c[[i]] = a[[i]];
}

fn main() -> Result<(), tensor_dsl::Error> {
    let a = Tensor::<f32>::zeros(&[2, 2]);
    let mut c = Tensor::<f32>::zeros(&[2, 2]);
    k(&a, &a, &mut c)?;
    let ir: &tensor_dsl::Kernel = k::kernel();
    println!("{}", ir.name);
    k::with(&Options::new())(&a, &a, &mut c)?;
    bad_param::with(&Options::new())(&a, &mut c)?;
    Ok(())
}

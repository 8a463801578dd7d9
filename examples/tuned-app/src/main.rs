//! Runs the kernels tuned at build time. Try it with `TENSOR_DSL_LOG=dispatch`: each first
//! call says where its config came from (`embedded` here).
use app_kernels::shapes::{BATCH, IN, OUT};
use app_kernels::{dense_relu, row_norms};
use tensor_dsl::Tensor;

tensor_dsl::include_tuned!();

fn main() -> Result<(), tensor_dsl::Error> {
    let x = Tensor::from_vec(
        vec![BATCH, IN],
        (0..BATCH * IN)
            .map(|v| (v % 13) as f32 / 13.0 - 0.5)
            .collect(),
    )?;
    let w = Tensor::from_vec(
        vec![IN, OUT],
        (0..IN * OUT).map(|v| (v % 7) as f32 / 7.0 - 0.5).collect(),
    )?;
    let b = Tensor::from_vec(vec![OUT], vec![0.1; OUT])?;
    let mut y = Tensor::zeros(&[BATCH, OUT]);
    let mut n = Tensor::zeros(&[BATCH]);
    dense_relu(&x, &w, &b, &mut y)?;
    row_norms(&x, &mut n)?;
    println!("dense_relu -> {y:?}");
    println!("row_norms  -> {n:?}");
    println!(
        "embedded records: {}",
        tensor_dsl::tuned::embedded_index().len()
    );
    Ok(())
}

//! Per-call overhead of a tiny kernel (8 elements): what dispatch, memo lookups and the
//! call into the compiled code cost when the arithmetic is negligible.
//!
//! ```sh
//! cargo run --release --example call_overhead
//! ```
use std::time::Instant;
use tensor_dsl::{tensor_kernel, Tensor};

#[tensor_kernel]
fn axpy(x: &Tensor<f32>, y: &Tensor<f32>, out: &mut Tensor<f32>) {
    out[[i]] = x[[i]] * 2.0 + y[[i]];
}

fn main() -> Result<(), tensor_dsl::Error> {
    let x = Tensor::from_vec(vec![8], (0..8).map(|v| v as f32).collect())?;
    let y = Tensor::from_vec(vec![8], vec![1.0f32; 8])?;
    let mut out = Tensor::<f32>::zeros(&[8]);
    axpy(&x, &y, &mut out)?; // compile once
    let calls = 200_000;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..calls {
            axpy(&x, &y, &mut out)?;
        }
        best = best.min(start.elapsed().as_secs_f64() / calls as f64);
    }
    println!(
        "{:.2} µs per call (best of 5 × {calls} calls); out[7] = {}",
        best * 1e6,
        out.as_slice()[7]
    );
    Ok(())
}

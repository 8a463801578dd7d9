//! One matmul in three element-type mixes, side by side in one run with the default CPU
//! schedule (no tuning): all `f32`; `bf16` operands with an `f32` output; all `f16`.
//! Sums are `f32` in every case. `f16` operands are widened to `f32` when read; `bf16`
//! operands on a CPU with AVX-512 BF16 go to `vdpbf16ps` in pairs (two exact products per
//! lane and instruction: twice the `f32` rate), elsewhere they are widened too.
//!
//! ```text
//! cargo run --release --example half_precision [-- M N K]
//! ```
//! Medians of several runs after a warm-up, alternating between the three.
use std::time::Instant;
use tensor_dsl::{bf16, f16, tensor_kernel, Element, Tensor};

#[tensor_kernel]
fn mm_f32(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

#[tensor_kernel]
fn mm_bf16(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

#[tensor_kernel]
fn mm_f16(a: &Tensor<f16>, b: &Tensor<f16>, c: &mut Tensor<f16>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn operand<T: Element>(rows: usize, cols: usize) -> Result<Tensor<T>, tensor_dsl::Error> {
    let values: Vec<f32> = (0..rows * cols)
        .map(|x| ((x * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    Tensor::from_f32(vec![rows, cols], &values)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Passive OpenMP waiting, so one run's spinning workers do not slow the next one.
    if std::env::var_os("OMP_WAIT_POLICY").is_none() {
        std::env::set_var("OMP_WAIT_POLICY", "PASSIVE");
    }
    let dims: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (m, n, k) = match dims.as_slice() {
        [m, n, k] => (*m, *n, *k),
        _ => (512, 1024, 1024),
    };
    let (a32, b32) = (operand::<f32>(m, k)?, operand::<f32>(k, n)?);
    let (ab, bb) = (operand::<bf16>(m, k)?, operand::<bf16>(k, n)?);
    let (ah, bh) = (operand::<f16>(m, k)?, operand::<f16>(k, n)?);
    let mut c32 = Tensor::<f32>::zeros(&[m, n]);
    let mut cb = Tensor::<f32>::zeros(&[m, n]);
    let mut ch = Tensor::<f16>::zeros(&[m, n]);
    let mut runs: [(&str, Vec<f64>); 3] = [("f32", vec![]), ("bf16->f32", vec![]), ("f16", vec![])];
    for round in 0..12 {
        for (n_run, (_, times)) in runs.iter_mut().enumerate() {
            let t = Instant::now();
            match n_run {
                0 => mm_f32(&a32, &b32, &mut c32)?,
                1 => mm_bf16(&ab, &bb, &mut cb)?,
                _ => mm_f16(&ah, &bh, &mut ch)?,
            }
            if round > 1 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
    }
    let flops = 2.0 * (m * n * k) as f64;
    println!("{m}x{k} · {k}x{n}, default CPU schedule, medians of 10 alternating runs");
    let base = median(runs[0].1.clone());
    for (name, times) in runs {
        let t = median(times);
        println!(
            "{name:>10}: {:8.3} ms  {:7.1} GFLOPS  {:.2}x the f32 time",
            t * 1e3,
            flops / t / 1e9,
            t / base
        );
    }
    // The same products (eighths are exact in every type; f16 rounds the sum once).
    let (x, y, z) = (
        c32.as_slice()[7],
        cb.as_slice()[7],
        ch.as_slice()[7].to_f32(),
    );
    println!("c[7]: {x} {y} {z}");
    Ok(())
}

//! A 512×512×512 matmul three ways, side by side in one run: tensor-dsl's default CPU
//! schedule (no tuning), the reference interpreter, and the `matrixmultiply` crate's sgemm.
//!
//! ```text
//! cargo run --release --example compare_blas [-- M N K]
//! ```
//! Each is timed as the median of several runs after a warm-up, alternating between them
//! so that machine noise hits all three alike.
use std::time::Instant;
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // OpenMP workers spin after each of our kernels by default and would steal the cores
    // from the sgemm that runs next; passive waiting makes the alternation fair. libgomp
    // reads this when it is loaded, which is at our first kernel call (after this line).
    if std::env::var_os("OMP_WAIT_POLICY").is_none() {
        std::env::set_var("OMP_WAIT_POLICY", "PASSIVE");
    }
    let dims: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (m, n, k) = match dims.as_slice() {
        [m, n, k] => (*m, *n, *k),
        _ => (512, 512, 512),
    };
    let a = Tensor::from_vec(
        vec![m, k],
        (0..m * k)
            .map(|x| ((x * 7 % 13) as f32 - 6.0) / 6.0)
            .collect(),
    )?;
    let b = Tensor::from_vec(
        vec![k, n],
        (0..k * n)
            .map(|x| ((x * 5 % 11) as f32 - 5.0) / 5.0)
            .collect(),
    )?;
    let flops = 2.0 * (m * n * k) as f64;

    let cpu = matmul::with(&Options::new().device(Device::Cpu));
    let reference = matmul::with(&Options::new().device(Device::Reference));
    let mut c_cpu = Tensor::<f32>::zeros(&[m, n]);
    let mut c_ref = Tensor::<f32>::zeros(&[m, n]);
    let mut c_blas = vec![0.0f32; m * n];
    let blas = |c: &mut [f32]| unsafe {
        // SAFETY: row-major m×k, k×n and m×n buffers of exactly those sizes.
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_slice().as_ptr(),
            k as isize,
            1,
            b.as_slice().as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        )
    };

    // Warm-up (compiles the CPU kernel) and correctness check.
    cpu(&a, &b, &mut c_cpu)?;
    reference(&a, &b, &mut c_ref)?;
    blas(&mut c_blas);
    let max_err = c_cpu
        .as_slice()
        .iter()
        .zip(&c_blas)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    let ref_err = c_ref
        .as_slice()
        .iter()
        .zip(&c_blas)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);

    let (mut t_cpu, mut t_ref, mut t_blas) = (vec![], vec![], vec![]);
    for round in 0..7 {
        let t = Instant::now();
        cpu(&a, &b, &mut c_cpu)?;
        t_cpu.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        blas(&mut c_blas);
        t_blas.push(t.elapsed().as_secs_f64());
        if round < 3 {
            // The interpreter is ~1000x slower; three runs are plenty.
            let t = Instant::now();
            reference(&a, &b, &mut c_ref)?;
            t_ref.push(t.elapsed().as_secs_f64());
        }
    }
    let gf = |t: f64| flops / t / 1e9;
    let (cpu_gf, ref_gf, blas_gf) = (gf(median(t_cpu)), gf(median(t_ref)), gf(median(t_blas)));
    println!(
        "matmul {m}x{k} * {k}x{n}, f32, {} threads available, OMP_WAIT_POLICY={}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        std::env::var("OMP_WAIT_POLICY").unwrap_or_default()
    );
    println!("  tensor-dsl cpu (default schedule) {cpu_gf:8.2} GFLOPS   max |diff| vs sgemm {max_err:.2e}");
    println!("  tensor-dsl reference interpreter  {ref_gf:8.2} GFLOPS   max |diff| vs sgemm {ref_err:.2e}");
    println!("  matrixmultiply::sgemm             {blas_gf:8.2} GFLOPS");
    println!("  ratio cpu / sgemm = {:.2}", cpu_gf / blas_gf);
    Ok(())
}

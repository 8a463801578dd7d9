//! The front door: annotate a function, call it, print the result and how long it took.
//!
//! ```text
//! cargo run --release --example matmul
//! RUST_LOG=tensor_dsl=debug cargo run --release --example matmul   # also compile times
//! ```
use std::time::Instant;
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

/// c = a · b
#[tensor_kernel]
pub fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// 3x3 convolution, stride 2, zero padding 1, fused bias + ReLU epilogue
#[tensor_kernel]
pub fn conv_bias_relu(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]];
    y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);
}

fn main() -> Result<(), tensor_dsl::Error> {
    // tensor-dsl logs through `tracing`: which schedule each call uses, compile times, tuning.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("tensor_dsl=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let (m, k, n) = (512, 1024, 64);
    let a = Tensor::from_vec(
        vec![m, k],
        (0..m * k).map(|x| (x % 7) as f32 - 3.0).collect(),
    )?;
    let b = Tensor::from_vec(
        vec![k, n],
        (0..k * n).map(|x| (x % 5) as f32 * 0.25).collect(),
    )?;
    let mut c = Tensor::<f32>::zeros(&[m, n]);

    let t = Instant::now();
    matmul(&a, &b, &mut c)?; // first call: generates C, compiles it, runs it
    let first = t.elapsed();
    let t = Instant::now();
    matmul(&a, &b, &mut c)?; // later calls reuse the compiled kernel
    let second = t.elapsed();
    println!("matmul {m}x{k} * {k}x{n} = {:?}", c);
    println!(
        "  first call {:.1} ms (includes compiling), second call {:.3} ms ({:.1} GFLOPS)",
        first.as_secs_f64() * 1e3,
        second.as_secs_f64() * 1e3,
        2.0 * (m * k * n) as f64 / second.as_secs_f64() / 1e9
    );

    let x = Tensor::from_vec(
        vec![1, 3, 32, 32],
        (0..3 * 32 * 32).map(|v| (v % 11) as f32 / 11.0).collect(),
    )?;
    let w = Tensor::from_vec(
        vec![8, 3, 3, 3],
        (0..8 * 27).map(|v| (v % 3) as f32 - 1.0).collect(),
    )?;
    let bias = Tensor::from_vec(vec![8], vec![0.1; 8])?;
    let mut y = Tensor::<f32>::zeros(&[1, 8, 16, 16]);
    // Settings through the `Options` builder (each has an environment variable too).
    let on_cpu = conv_bias_relu::with(&Options::new().device(Device::Cpu));
    let t = Instant::now();
    on_cpu(&x, &w, &bias, &mut y)?;
    println!(
        "conv_bias_relu -> {:?} in {:.1} ms",
        y,
        t.elapsed().as_secs_f64() * 1e3
    );

    // Shape errors are values, not panics:
    let wrong = Tensor::<f32>::zeros(&[3, 3]);
    if let Err(e) = matmul(&a, &wrong, &mut c) {
        println!("a wrong shape is an error: {e}");
    }
    Ok(())
}

//! End-to-end: reductions other than sums and kernels of several stages, written in the
//! documented syntax (softmax, layer norm, RMS norm, 3x3 stride-2 max pooling with padding
//! 1, a row minimum, a half-precision softmax), run on the CPU backend, the reference
//! interpreter and (when a GPU is usable) CUDA, and compared with naive loops written out
//! here, on awkward shapes (one column, odd lengths, more than 1000 columns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

use rand::{rngs::StdRng, Rng, SeedableRng};
use tensor_dsl::{f16, tensor_kernel, Device, Element, Options, Tensor};

/// Row-wise softmax.
#[tensor_kernel]
fn softmax(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

/// Layer norm with a learned scale and shift.
#[tensor_kernel]
fn layer_norm(x: &Tensor<f32>, gamma: &Tensor<f32>, beta: &Tensor<f32>, y: &mut Tensor<f32>) {
    mu[[i]] = mean(x[[i, j]]);
    var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]]));
    y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 1e-5) * gamma[[j]] + beta[[j]];
}

/// RMS norm.
#[tensor_kernel]
fn rms_norm(x: &Tensor<f32>, g: &Tensor<f32>, y: &mut Tensor<f32>) {
    ms[[i]] = mean(x[[i, j]] * x[[i, j]]);
    y[[i, j]] = x[[i, j]] * rsqrt(ms[[i]] + 1e-6) * g[[j]];
}

/// 3x3 max pooling, stride 2, padding 1 (padding reads −∞).
#[tensor_kernel]
fn max_pool(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..3;
    let s = 0..3;
    y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]]);
}

/// The minimum of each row.
#[tensor_kernel]
fn row_min(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = min(x[[i, j]]);
}

/// Softmax over `f16` data: statistics in `f32`, the output rounded once.
#[tensor_kernel]
fn softmax_f16(x: &Tensor<f16>, y: &mut Tensor<f16>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

fn random<T: Element>(shape: &[usize], rng: &mut StdRng) -> Tensor<T> {
    let n = shape.iter().product::<usize>();
    let values: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0..3.0)).collect();
    Tensor::from_f32(shape.to_vec(), &values).unwrap()
}

fn check<T: Element>(got: &Tensor<T>, want: &[f64], what: &str) {
    let tol = match T::DTYPE {
        tensor_dsl::ir::DType::F32 => 2e-5,
        d => tensor_dsl::measure::tolerance(d) as f64 + 1e-4,
    };
    let got = got.to_f32();
    assert_eq!(got.len(), want.len(), "{what}");
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(*g);
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {n}: got {g}, expected {w}"
        );
    }
}

/// The CPU and the reference interpreter, and the GPU when one is usable (else a line says
/// why it was left out).
fn devices() -> Vec<(Device, Options)> {
    let mut v = vec![
        (Device::Cpu, Options::new().device(Device::Cpu)),
        (Device::Reference, Options::new().device(Device::Reference)),
    ];
    match Device::Cuda.availability() {
        Ok(()) => v.push((Device::Cuda, Options::new().device(Device::Cuda))),
        // Skips the GPU here; with TENSOR_DSL_REQUIRE_GPU=1 that is a failure.
        Err(_) => {
            tensor_dsl::testing::gpu("stages on CUDA");
        }
    }
    v
}

fn f64s<T: Element>(t: &Tensor<T>) -> Vec<f64> {
    t.to_f32().into_iter().map(f64::from).collect()
}

fn naive_softmax(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * cols];
    for i in 0..rows {
        let row = &x[i * cols..(i + 1) * cols];
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for j in 0..cols {
            y[i * cols + j] = (row[j] - m).exp() / s;
        }
    }
    y
}

const ROWS_COLS: &[(usize, usize)] = &[
    (1, 1),
    (3, 1),
    (1, 7),
    (5, 33),
    (7, 1000),
    (4, 1537),
    (64, 100),
];

#[test]
fn softmax_matches_naive() {
    let mut rng = StdRng::seed_from_u64(1);
    for &(rows, cols) in ROWS_COLS {
        let x: Tensor<f32> = random(&[rows, cols], &mut rng);
        let want = naive_softmax(&f64s(&x), rows, cols);
        for (dev, opts) in devices() {
            let mut y = Tensor::<f32>::zeros(&[rows, cols]);
            softmax::with(&opts)(&x, &mut y).unwrap();
            check(&y, &want, &format!("softmax {rows}x{cols} on {dev:?}"));
        }
    }
}

#[test]
fn softmax_in_half_precision() {
    let mut rng = StdRng::seed_from_u64(2);
    for &(rows, cols) in &[(3, 5), (9, 1001)] {
        let x: Tensor<f16> = random(&[rows, cols], &mut rng);
        let want = naive_softmax(&f64s(&x), rows, cols);
        for (dev, opts) in devices() {
            let mut y = Tensor::<f16>::zeros(&[rows, cols]);
            softmax_f16::with(&opts)(&x, &mut y).unwrap();
            check(&y, &want, &format!("f16 softmax {rows}x{cols} on {dev:?}"));
        }
    }
}

#[test]
fn layer_norm_and_rms_norm_match_naive() {
    let mut rng = StdRng::seed_from_u64(3);
    for &(rows, cols) in ROWS_COLS {
        let x: Tensor<f32> = random(&[rows, cols], &mut rng);
        let gamma: Tensor<f32> = random(&[cols], &mut rng);
        let beta: Tensor<f32> = random(&[cols], &mut rng);
        let (xv, gv, bv) = (f64s(&x), f64s(&gamma), f64s(&beta));
        let mut ln = vec![0.0; rows * cols];
        let mut rms = vec![0.0; rows * cols];
        for i in 0..rows {
            let row = &xv[i * cols..(i + 1) * cols];
            let mu = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / cols as f64;
            let ms = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            for j in 0..cols {
                ln[i * cols + j] = (row[j] - mu) / (var + 1e-5).sqrt() * gv[j] + bv[j];
                rms[i * cols + j] = row[j] / (ms + 1e-6).sqrt() * gv[j];
            }
        }
        for (dev, opts) in devices() {
            let mut y = Tensor::<f32>::zeros(&[rows, cols]);
            layer_norm::with(&opts)(&x, &gamma, &beta, &mut y).unwrap();
            // One column: the variance is 0 and the output is beta (up to rounding of 0/√ε).
            check(&y, &ln, &format!("layer norm {rows}x{cols} on {dev:?}"));
            let mut y = Tensor::<f32>::zeros(&[rows, cols]);
            rms_norm::with(&opts)(&x, &gamma, &mut y).unwrap();
            check(&y, &rms, &format!("rms norm {rows}x{cols} on {dev:?}"));
        }
    }
}

#[test]
fn max_pool_pads_with_minus_infinity() {
    let mut rng = StdRng::seed_from_u64(4);
    for &(n, c, h, w) in &[(1, 1, 1, 1), (2, 3, 7, 5), (1, 4, 16, 16), (1, 2, 9, 112)] {
        let (p_out, q_out) = ((h - 1) / 2 + 1, (w - 1) / 2 + 1);
        // All-negative inputs: a zero-padded pooling would give 0 at the borders.
        let values: Vec<f32> = (0..n * c * h * w)
            .map(|_| rng.gen_range(-5.0..-1.0))
            .collect();
        let x = Tensor::from_vec(vec![n, c, h, w], values.clone()).unwrap();
        let mut want = vec![f64::NEG_INFINITY; n * c * p_out * q_out];
        for b in 0..n {
            for ch in 0..c {
                for p in 0..p_out {
                    for q in 0..q_out {
                        let o = ((b * c + ch) * p_out + p) * q_out + q;
                        for r in 0..3 {
                            for s in 0..3 {
                                let (hh, ww) = ((2 * p + r) as i64 - 1, (2 * q + s) as i64 - 1);
                                if hh >= 0 && ww >= 0 && (hh as usize) < h && (ww as usize) < w {
                                    let v =
                                        values[((b * c + ch) * h + hh as usize) * w + ww as usize];
                                    want[o] = want[o].max(f64::from(v));
                                }
                            }
                        }
                    }
                }
            }
        }
        for (dev, opts) in devices() {
            let mut y = Tensor::<f32>::zeros(&[n, c, p_out, q_out]);
            max_pool::with(&opts)(&x, &mut y).unwrap();
            check(&y, &want, &format!("max pool {n}x{c}x{h}x{w} on {dev:?}"));
        }
    }
}

#[test]
fn row_min_matches_naive() {
    let mut rng = StdRng::seed_from_u64(5);
    for &(rows, cols) in ROWS_COLS {
        let x: Tensor<f32> = random(&[rows, cols], &mut rng);
        let xv = f64s(&x);
        let want: Vec<f64> = (0..rows)
            .map(|i| {
                xv[i * cols..(i + 1) * cols]
                    .iter()
                    .copied()
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        for (dev, opts) in devices() {
            let mut y = Tensor::<f32>::zeros(&[rows]);
            row_min::with(&opts)(&x, &mut y).unwrap();
            check(&y, &want, &format!("row min {rows}x{cols} on {dev:?}"));
        }
    }
}

#[test]
fn wrong_shapes_are_errors() {
    let x = Tensor::<f32>::zeros(&[4, 5]);
    let mut y = Tensor::<f32>::zeros(&[4, 6]);
    let e = softmax(&x, &mut y).unwrap_err().to_string();
    assert!(e.contains("`j`"), "{e}");
    let x = Tensor::<f32>::zeros(&[1, 1, 8, 8]);
    let mut y = Tensor::<f32>::zeros(&[1, 1, 4]);
    assert!(max_pool(&x, &mut y).is_err());
}

#[test]
fn the_ir_says_what_was_written() {
    let k = softmax::kernel();
    assert!(k.is_staged());
    assert_eq!(k.stages().len(), 2);
    assert_eq!(
        k.to_string(),
        "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp((x[[i, j]] - m[[i]]))); y[[i, j]] = (exp((x[[i, j]] - m[[i]])) / s[[i]]);"
    );
    let text = tensor_dsl::ir::parse_text("softmax", &k.to_string(), None).unwrap();
    assert_eq!(text.fingerprint(), k.fingerprint());
    assert_eq!(
        max_pool::kernel().to_string(),
        "let r = 0..3; let s = 0..3; y[[n, c, p, q]] = max(x[[n, c, ((2*p + r) - 1), ((2*q + s) - 1)]]);"
            .replace("((2*p + r) - 1)", "2*p + r - 1")
            .replace("((2*q + s) - 1)", "2*q + s - 1")
    );
}

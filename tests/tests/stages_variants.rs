//! End-to-end: variants of the documented kernels of several stages that `stages.rs` does
//! not write — softmax with a temperature, log-softmax, softmax over the first axis or over
//! a 3-D tensor, mixed element types; layer norm without (or with only) a scale, with the
//! variance from `mean(x * x)` in a statement of its own, over `[b, t, d]`; RMS norm with
//! `sqrt` and a division, `(1.0 + g)`, in `f16`; max pooling channels-last, 2x2 stride 2,
//! "same" 3x3 stride 1, non-square windows, a 2-D pool, min and mean pooling; row and
//! column reductions, a reduction over two indices, a full reduction to rank 0, a reduction
//! with an epilogue and a scalar — each written with `#[tensor_kernel]` and run on the CPU
//! backend, the reference interpreter and (when a GPU is usable) CUDA, against naive loops
//! in `f64` written out here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop,
    clippy::too_many_arguments
)]

use rand::{rngs::StdRng, Rng, SeedableRng};
use tensor_dsl::{bf16, f16, tensor_kernel, Device, Element, Options, Tensor};

// ---------------------------------------------------------------------------------------
// Softmax variants.

/// Softmax of `x / t` (a temperature).
#[tensor_kernel]
fn softmax_temperature(x: &Tensor<f32>, t: f32, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]] / t);
    s[[i]] = sum(exp(x[[i, j]] / t - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] / t - m[[i]]) / s[[i]];
}

/// The temperature applied after the maximum.
#[tensor_kernel]
fn softmax_temperature_late(x: &Tensor<f32>, t: f32, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp((x[[i, j]] - m[[i]]) / t));
    y[[i, j]] = exp((x[[i, j]] - m[[i]]) / t) / s[[i]];
}

#[tensor_kernel]
fn log_softmax(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = x[[i, j]] - m[[i]] - log(s[[i]]);
}

/// Softmax over the first axis (each column sums to 1).
#[tensor_kernel]
fn softmax_columns(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[j]] = max(x[[i, j]]);
    s[[j]] = sum(exp(x[[i, j]] - m[[j]]));
    y[[i, j]] = exp(x[[i, j]] - m[[j]]) / s[[j]];
}

/// Softmax over the last axis of a 3-D tensor (attention scores).
#[tensor_kernel]
fn softmax_3d(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[b, i]] = max(x[[b, i, j]]);
    s[[b, i]] = sum(exp(x[[b, i, j]] - m[[b, i]]));
    y[[b, i, j]] = exp(x[[b, i, j]] - m[[b, i]]) / s[[b, i]];
}

/// Softmax over the middle axis of a 3-D tensor.
#[tensor_kernel]
fn softmax_middle(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[b, j]] = max(x[[b, i, j]]);
    s[[b, j]] = sum(exp(x[[b, i, j]] - m[[b, j]]));
    y[[b, i, j]] = exp(x[[b, i, j]] - m[[b, j]]) / s[[b, j]];
}

#[tensor_kernel]
fn softmax_bf16_in(x: &Tensor<bf16>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

#[tensor_kernel]
fn softmax_f16_out(x: &Tensor<f32>, y: &mut Tensor<f16>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

/// The division as an epilogue of the output's statement.
#[tensor_kernel]
fn softmax_epilogue(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]);
    y[[i, j]] = y[[i, j]] / s[[i]];
}

/// The output first among the parameters.
#[tensor_kernel]
fn softmax_output_first(y: &mut Tensor<f32>, x: &Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

/// Log-sum-exp of each row, the output a reduction with an epilogue.
#[tensor_kernel]
fn logsumexp(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    y[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i]] = m[[i]] + log(y[[i]]);
}

// ---------------------------------------------------------------------------------------
// Layer norm and RMS norm variants.

#[tensor_kernel]
fn layer_norm_plain(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    mu[[i]] = mean(x[[i, j]]);
    var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]]));
    y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 0.00001);
}

#[tensor_kernel]
fn layer_norm_scale(x: &Tensor<f32>, gamma: &Tensor<f32>, y: &mut Tensor<f32>) {
    mu[[i]] = mean(x[[i, j]]);
    var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]]));
    y[[i, j]] = (x[[i, j]] - mu[[i]]) / sqrt(var[[i]] + 0.00001) * gamma[[j]];
}

/// The variance as E[x²] − E[x]², in a statement of its own.
#[tensor_kernel]
fn layer_norm_moments(
    x: &Tensor<f32>,
    gamma: &Tensor<f32>,
    beta: &Tensor<f32>,
    y: &mut Tensor<f32>,
) {
    mu[[i]] = mean(x[[i, j]]);
    ms[[i]] = mean(x[[i, j]] * x[[i, j]]);
    var[[i]] = ms[[i]] - mu[[i]] * mu[[i]];
    y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 1e-5) * gamma[[j]] + beta[[j]];
}

/// Over the last axis of `[b, t, d]`, everything `f16`.
#[tensor_kernel]
fn layer_norm_3d_f16(
    x: &Tensor<f16>,
    gamma: &Tensor<f16>,
    beta: &Tensor<f16>,
    y: &mut Tensor<f16>,
) {
    mu[[b, t]] = mean(x[[b, t, d]]);
    var[[b, t]] = mean((x[[b, t, d]] - mu[[b, t]]) * (x[[b, t, d]] - mu[[b, t]]));
    y[[b, t, d]] = (x[[b, t, d]] - mu[[b, t]]) * rsqrt(var[[b, t]] + 1e-5) * gamma[[d]] + beta[[d]];
}

/// `bf16` data, `f32` parameters and output.
#[tensor_kernel]
fn layer_norm_bf16_in(
    x: &Tensor<bf16>,
    gamma: &Tensor<f32>,
    beta: &Tensor<f32>,
    y: &mut Tensor<f32>,
) {
    mu[[i]] = mean(x[[i, j]]);
    var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]]));
    y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 1e-5) * gamma[[j]] + beta[[j]];
}

#[tensor_kernel]
fn rms_norm_sqrt(x: &Tensor<f32>, g: &Tensor<f32>, y: &mut Tensor<f32>) {
    ms[[i]] = mean(x[[i, j]] * x[[i, j]]);
    y[[i, j]] = x[[i, j]] / sqrt(ms[[i]] + 1e-6) * (1.0 + g[[j]]);
}

#[tensor_kernel]
fn rms_norm_f16(x: &Tensor<f16>, g: &Tensor<f16>, y: &mut Tensor<f16>) {
    ms[[i]] = mean(x[[i, j]] * x[[i, j]]);
    y[[i, j]] = x[[i, j]] * rsqrt(ms[[i]] + 1e-6) * g[[j]];
}

/// The epsilon a scalar parameter.
#[tensor_kernel]
fn rms_norm_eps(x: &Tensor<f32>, g: &Tensor<f32>, eps: f32, y: &mut Tensor<f32>) {
    ms[[i]] = sum(x[[i, j]] * x[[i, j]]);
    y[[i, j]] = g[[j]] * x[[i, j]] * rsqrt(ms[[i]] / 37.0 + eps);
}

// ---------------------------------------------------------------------------------------
// Pooling.

/// 3x3 stride 2 padding 1, channels last.
#[tensor_kernel]
fn max_pool_nhwc(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..3;
    let s = 0..3;
    y[[n, p, q, c]] = max(x[[n, 2 * p + r - 1, 2 * q + s - 1, c]]);
}

/// 2x2 stride 2, no padding.
#[tensor_kernel]
fn max_pool_2x2(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..2;
    let s = 0..2;
    y[[n, c, p, q]] = max(x[[n, c, 2 * p + r, 2 * q + s]]);
}

/// 3x3 stride 1 "same" (padding 1).
#[tensor_kernel]
fn max_pool_same(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..3;
    let s = 0..3;
    y[[n, c, p, q]] = max(x[[n, c, p + r - 1, q + s - 1]]);
}

/// A 2x3 window, strides 2 and 3, no padding.
#[tensor_kernel]
fn max_pool_2x3(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let kh = 0..2;
    let kw = 0..3;
    y[[n, c, p, q]] = max(x[[n, c, 2 * p + kh, 3 * q + kw]]);
}

/// A 2-D pool.
#[tensor_kernel]
fn max_pool_2d(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..3;
    let s = 0..3;
    y[[p, q]] = max(x[[2 * p + r - 1, 2 * q + s - 1]]);
}

#[tensor_kernel]
fn min_pool_nhwc(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..2;
    let s = 0..2;
    y[[n, p, q, c]] = min(x[[n, 2 * p + r, 2 * q + s, c]]);
}

/// Mean pooling with padding (divides by the whole window).
#[tensor_kernel]
fn avg_pool(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = 0..3;
    let s = 0..3;
    y[[n, c, p, q]] = mean(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]]);
}

#[tensor_kernel]
fn max_pool_f16(x: &Tensor<f16>, y: &mut Tensor<f16>) {
    let r = 0..3;
    let s = 0..3;
    y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]]);
}

// ---------------------------------------------------------------------------------------
// Row, column and full reductions.

#[tensor_kernel]
fn row_max(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = max(x[[i, j]]);
}

#[tensor_kernel]
fn row_sum(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = sum(x[[i, j]]);
}

#[tensor_kernel]
fn row_prod(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = prod(x[[i, j]]);
}

#[tensor_kernel]
fn row_mean(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = mean(x[[i, j]]);
}

#[tensor_kernel]
fn column_min(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[j]] = min(x[[i, j]]);
}

/// The minimum over the last two axes.
#[tensor_kernel]
fn min_two(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = min(x[[i, j, k]]);
}

/// The minimum over the first and last axes.
#[tensor_kernel]
fn min_outer(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[j]] = min(x[[i, j, k]]);
}

/// The maximum of the whole tensor, a rank-0 output.
#[tensor_kernel]
fn full_max(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[]] = max(x[[i, j]]);
}

/// A row minimum, then an epilogue with a scalar and a bias.
#[tensor_kernel]
fn row_min_epilogue(x: &Tensor<f32>, bias: &Tensor<f32>, alpha: f32, y: &mut Tensor<f32>) {
    y[[i]] = min(x[[i, j]]);
    y[[i]] = y[[i]] * alpha + bias[[i]];
}

#[tensor_kernel]
fn row_min_f16(x: &Tensor<f16>, y: &mut Tensor<f32>) {
    y[[i]] = min(x[[i, j]]);
}

// ---------------------------------------------------------------------------------------
// Harness.

fn random<T: Element>(shape: &[usize], lo: f32, hi: f32, rng: &mut StdRng) -> Tensor<T> {
    let n = shape.iter().product::<usize>();
    let values: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
    Tensor::from_f32(shape.to_vec(), &values).unwrap()
}

fn f64s<T: Element>(t: &Tensor<T>) -> Vec<f64> {
    t.to_f32().into_iter().map(f64::from).collect()
}

/// Within 2e-5 relative for `f32` (plus 1e-4 and two units in the last place for half
/// precision); NaN where NaN is expected, infinities equal.
fn check<T: Element>(got: &Tensor<T>, want: &[f64], what: &str) {
    let tol = match T::DTYPE {
        tensor_dsl::ir::DType::F32 => 2e-5,
        d => tensor_dsl::measure::tolerance(d) as f64 + 1e-4,
    };
    let got = got.to_f32();
    assert_eq!(got.len(), want.len(), "{what}");
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(*g);
        let ok = (g.is_nan() && w.is_nan()) || g == *w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {n}: got {g}, expected {w}");
    }
}

fn devices() -> Vec<(Device, Options)> {
    let mut v = vec![
        (Device::Cpu, Options::new().device(Device::Cpu)),
        (Device::Reference, Options::new().device(Device::Reference)),
    ];
    match Device::Cuda.availability() {
        Ok(()) => v.push((Device::Cuda, Options::new().device(Device::Cuda))),
        Err(_) => {
            tensor_dsl::testing::gpu("stage variants on CUDA");
        }
    }
    v
}

/// Softmax of each of `groups` sets of `n` values, set `g` at `at(g, k)` (k < n).
fn naive_softmax(
    x: &[f64],
    groups: usize,
    n: usize,
    at: impl Fn(usize, usize) -> usize,
) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for g in 0..groups {
        let m = (0..n)
            .map(|k| x[at(g, k)])
            .fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = (0..n).map(|k| (x[at(g, k)] - m).exp()).sum();
        for k in 0..n {
            y[at(g, k)] = (x[at(g, k)] - m).exp() / s;
        }
    }
    y
}

/// (mean, biased variance) of each row.
fn moments(row: &[f64]) -> (f64, f64) {
    let n = row.len() as f64;
    let mu = row.iter().sum::<f64>() / n;
    (mu, row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n)
}

const ROWS_COLS: &[(usize, usize)] = &[
    (1, 1),
    (1, 7),
    (3, 1),
    (5, 16),
    (3, 32),
    (4, 64),
    (7, 13),
    (2, 4097),
    (67, 33),
];

#[test]
fn softmax_variants_match_naive() {
    let mut rng = StdRng::seed_from_u64(11);
    for &(rows, cols) in ROWS_COLS {
        let x: Tensor<f32> = random(&[rows, cols], -3.0, 3.0, &mut rng);
        let xv = f64s(&x);
        let t = 0.7f32;
        let scaled: Vec<f64> = xv.iter().map(|v| v / f64::from(t)).collect();
        let want_t = naive_softmax(&scaled, rows, cols, |g, k| g * cols + k);
        let want = naive_softmax(&xv, rows, cols, |g, k| g * cols + k);
        let want_cols = naive_softmax(&xv, cols, rows, |g, k| k * cols + g);
        let mut want_log = vec![0.0; rows * cols];
        let mut want_lse = vec![0.0; rows];
        for i in 0..rows {
            let row = &xv[i * cols..(i + 1) * cols];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for j in 0..cols {
                want_log[i * cols + j] = row[j] - m - s.ln();
            }
            want_lse[i] = m + s.ln();
        }
        for (dev, opts) in devices() {
            let what = |k: &str| format!("{k} {rows}x{cols} on {dev:?}");
            let mut y = Tensor::<f32>::zeros(&[rows, cols]);
            softmax_temperature::with(&opts)(&x, t, &mut y).unwrap();
            check(&y, &want_t, &what("softmax_temperature"));
            softmax_temperature_late::with(&opts)(&x, t, &mut y).unwrap();
            check(&y, &want_t, &what("softmax_temperature_late"));
            log_softmax::with(&opts)(&x, &mut y).unwrap();
            check(&y, &want_log, &what("log_softmax"));
            softmax_columns::with(&opts)(&x, &mut y).unwrap();
            check(&y, &want_cols, &what("softmax_columns"));
            softmax_epilogue::with(&opts)(&x, &mut y).unwrap();
            check(&y, &want, &what("softmax_epilogue"));
            softmax_output_first::with(&opts)(&mut y, &x).unwrap();
            check(&y, &want, &what("softmax_output_first"));
            let mut l = Tensor::<f32>::zeros(&[rows]);
            logsumexp::with(&opts)(&x, &mut l).unwrap();
            check(&l, &want_lse, &what("logsumexp"));
        }
    }
}

#[test]
fn softmax_over_3d_tensors_matches_naive() {
    let mut rng = StdRng::seed_from_u64(12);
    for &(b, i, j) in &[(1, 1, 1), (2, 3, 17), (3, 5, 64), (2, 1, 300)] {
        let x: Tensor<f32> = random(&[b, i, j], -3.0, 3.0, &mut rng);
        let xv = f64s(&x);
        let last = naive_softmax(&xv, b * i, j, |g, k| g * j + k);
        let middle = naive_softmax(&xv, b * j, i, |g, k| (g / j * i + k) * j + g % j);
        for (dev, opts) in devices() {
            let mut y = Tensor::<f32>::zeros(&[b, i, j]);
            softmax_3d::with(&opts)(&x, &mut y).unwrap();
            check(&y, &last, &format!("softmax_3d {b}x{i}x{j} on {dev:?}"));
            softmax_middle::with(&opts)(&x, &mut y).unwrap();
            check(
                &y,
                &middle,
                &format!("softmax_middle {b}x{i}x{j} on {dev:?}"),
            );
        }
    }
}

/// Large inputs (1000 + noise: `exp(x)` alone overflows), and rows with −∞ entries.
#[test]
fn softmax_is_stable_on_large_and_infinite_inputs() {
    let mut rng = StdRng::seed_from_u64(13);
    for &(rows, cols) in &[(3, 16), (2, 32), (5, 33), (2, 4097)] {
        let big: Tensor<f32> = random(&[rows, cols], 997.0, 1003.0, &mut rng);
        let mut inf = random::<f32>(&[rows, cols], -3.0, 3.0, &mut rng).to_f32();
        for (n, v) in inf.iter_mut().enumerate() {
            if n % 3 == 1 {
                *v = f32::NEG_INFINITY;
            }
        }
        let inf = Tensor::from_vec(vec![rows, cols], inf).unwrap();
        for x in [big, inf] {
            let xv = f64s(&x);
            let want = naive_softmax(&xv, rows, cols, |g, k| g * cols + k);
            for (dev, opts) in devices() {
                let mut y = Tensor::<f32>::zeros(&[rows, cols]);
                softmax_epilogue::with(&opts)(&x, &mut y).unwrap();
                check(&y, &want, &format!("softmax {rows}x{cols} on {dev:?}"));
            }
        }
    }
}

#[test]
fn softmax_with_mixed_element_types_matches_naive() {
    let mut rng = StdRng::seed_from_u64(14);
    for &(rows, cols) in ROWS_COLS {
        let xb: Tensor<bf16> = random(&[rows, cols], -3.0, 3.0, &mut rng);
        let want_b = naive_softmax(&f64s(&xb), rows, cols, |g, k| g * cols + k);
        let x: Tensor<f32> = random(&[rows, cols], -3.0, 3.0, &mut rng);
        let want = naive_softmax(&f64s(&x), rows, cols, |g, k| g * cols + k);
        for (dev, opts) in devices() {
            let mut y = Tensor::<f32>::zeros(&[rows, cols]);
            softmax_bf16_in::with(&opts)(&xb, &mut y).unwrap();
            check(
                &y,
                &want_b,
                &format!("bf16 -> f32 softmax {rows}x{cols} on {dev:?}"),
            );
            let mut h = Tensor::<f16>::zeros(&[rows, cols]);
            softmax_f16_out::with(&opts)(&x, &mut h).unwrap();
            check(
                &h,
                &want,
                &format!("f32 -> f16 softmax {rows}x{cols} on {dev:?}"),
            );
        }
    }
}

#[test]
fn norm_variants_match_naive() {
    let mut rng = StdRng::seed_from_u64(15);
    for &(rows, cols) in ROWS_COLS {
        let x: Tensor<f32> = random(&[rows, cols], -3.0, 3.0, &mut rng);
        let gamma: Tensor<f32> = random(&[cols], -2.0, 2.0, &mut rng);
        let beta: Tensor<f32> = random(&[cols], -2.0, 2.0, &mut rng);
        let (xv, gv, bv) = (f64s(&x), f64s(&gamma), f64s(&beta));
        let n = rows * cols;
        let (mut plain, mut scale, mut full, mut rms) =
            (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for i in 0..rows {
            let row = &xv[i * cols..(i + 1) * cols];
            let (mu, var) = moments(row);
            let ms = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            for j in 0..cols {
                let z = (row[j] - mu) / (var + 1e-5).sqrt();
                plain[i * cols + j] = z;
                scale[i * cols + j] = z * gv[j];
                full[i * cols + j] = z * gv[j] + bv[j];
                rms[i * cols + j] = row[j] / (ms + 1e-6).sqrt() * (1.0 + gv[j]);
            }
        }
        for (dev, opts) in devices() {
            let what = |k: &str| format!("{k} {rows}x{cols} on {dev:?}");
            let mut y = Tensor::<f32>::zeros(&[rows, cols]);
            layer_norm_plain::with(&opts)(&x, &mut y).unwrap();
            check(&y, &plain, &what("layer_norm_plain"));
            layer_norm_scale::with(&opts)(&x, &gamma, &mut y).unwrap();
            check(&y, &scale, &what("layer_norm_scale"));
            layer_norm_moments::with(&opts)(&x, &gamma, &beta, &mut y).unwrap();
            // E[x²] − E[x]² cancels: looser.
            for (g, w) in y.to_f32().iter().zip(&full) {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-3 * (1.0 + w.abs()),
                    "{}: {g} vs {w}",
                    what("layer_norm_moments")
                );
            }
            rms_norm_sqrt::with(&opts)(&x, &gamma, &mut y).unwrap();
            check(&y, &rms, &what("rms_norm_sqrt"));
        }
    }
}

#[test]
fn norms_in_half_precision_match_naive() {
    let mut rng = StdRng::seed_from_u64(16);
    for &(b, t, d) in &[(1, 1, 1), (2, 3, 17), (2, 2, 768), (1, 5, 64)] {
        let x: Tensor<f16> = random(&[b, t, d], -3.0, 3.0, &mut rng);
        let g: Tensor<f16> = random(&[d], -2.0, 2.0, &mut rng);
        let be: Tensor<f16> = random(&[d], -2.0, 2.0, &mut rng);
        let (xv, gv, bv) = (f64s(&x), f64s(&g), f64s(&be));
        let mut ln = vec![0.0; b * t * d];
        let mut rms = vec![0.0; b * t * d];
        for r in 0..b * t {
            let row = &xv[r * d..(r + 1) * d];
            let (mu, var) = moments(row);
            let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
            for k in 0..d {
                ln[r * d + k] = (row[k] - mu) / (var + 1e-5).sqrt() * gv[k] + bv[k];
                rms[r * d + k] = row[k] / (ms + 1e-6).sqrt() * gv[k];
            }
        }
        let xb: Tensor<bf16> = Tensor::from_f32(vec![b * t, d], &x.to_f32()).unwrap();
        let (g32, b32): (Tensor<f32>, Tensor<f32>) = (
            Tensor::from_f32(vec![d], &g.to_f32()).unwrap(),
            Tensor::from_f32(vec![d], &be.to_f32()).unwrap(),
        );
        let xh2 = x.clone().reshape(&[b * t, d]).unwrap();
        for (dev, opts) in devices() {
            let mut y = Tensor::<f16>::zeros(&[b, t, d]);
            layer_norm_3d_f16::with(&opts)(&x, &g, &be, &mut y).unwrap();
            check(&y, &ln, &format!("f16 layer norm {b}x{t}x{d} on {dev:?}"));
            let mut y = Tensor::<f32>::zeros(&[b * t, d]);
            layer_norm_bf16_in::with(&opts)(&xb, &g32, &b32, &mut y).unwrap();
            // (f16 values are exact in bf16 only up to 8 bits: compare with what bf16 holds.)
            let xbv = f64s(&xb);
            let mut want = vec![0.0; b * t * d];
            for r in 0..b * t {
                let row = &xbv[r * d..(r + 1) * d];
                let (mu, var) = moments(row);
                for k in 0..d {
                    want[r * d + k] = (row[k] - mu) / (var + 1e-5).sqrt() * gv[k] + bv[k];
                }
            }
            check(
                &y,
                &want,
                &format!("bf16 layer norm {b}x{t}x{d} on {dev:?}"),
            );
            let mut y = Tensor::<f16>::zeros(&[b * t, d]);
            rms_norm_f16::with(&opts)(&xh2, &g, &mut y).unwrap();
            check(&y, &rms, &format!("f16 rms norm {b}x{t}x{d} on {dev:?}"));
        }
    }
}

#[test]
fn rms_norm_with_a_scalar_epsilon() {
    let mut rng = StdRng::seed_from_u64(17);
    let x: Tensor<f32> = random(&[9, 37], -3.0, 3.0, &mut rng);
    let g: Tensor<f32> = random(&[37], -2.0, 2.0, &mut rng);
    let (xv, gv) = (f64s(&x), f64s(&g));
    let eps = 1e-3f32;
    let mut want = vec![0.0; 9 * 37];
    for i in 0..9 {
        let row = &xv[i * 37..(i + 1) * 37];
        let ms = row.iter().map(|v| v * v).sum::<f64>() / 37.0;
        for j in 0..37 {
            want[i * 37 + j] = gv[j] * row[j] / (ms + f64::from(eps)).sqrt();
        }
    }
    for (dev, opts) in devices() {
        let mut y = Tensor::<f32>::zeros(&[9, 37]);
        rms_norm_eps::with(&opts)(&x, &g, eps, &mut y).unwrap();
        check(&y, &want, &format!("rms norm eps on {dev:?}"));
    }
}

/// A naive pooling: `get(p, q, r, s)` is the input's value at window point (r, s) of output
/// (p, q) of one image plane, `None` outside.
#[derive(Clone, Copy)]
enum Red {
    Max,
    Min,
    Mean,
}

struct Pool {
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
}

impl Pool {
    fn out(&self) -> (usize, usize) {
        (
            (self.h + 2 * self.ph - self.kh) / self.sh + 1,
            (self.w + 2 * self.pw - self.kw) / self.sw + 1,
        )
    }

    /// One plane (row-major `h x w`, read through `at`).
    fn plane(&self, red: Red, at: impl Fn(usize, usize) -> f64) -> Vec<f64> {
        let (po, qo) = self.out();
        let mut out = Vec::with_capacity(po * qo);
        for p in 0..po {
            for q in 0..qo {
                let mut acc = match red {
                    Red::Max => f64::NEG_INFINITY,
                    Red::Min => f64::INFINITY,
                    Red::Mean => 0.0,
                };
                for r in 0..self.kh {
                    for s in 0..self.kw {
                        let hh = (p * self.sh + r) as i64 - self.ph as i64;
                        let ww = (q * self.sw + s) as i64 - self.pw as i64;
                        if hh < 0 || ww < 0 || hh as usize >= self.h || ww as usize >= self.w {
                            continue;
                        }
                        let v = at(hh as usize, ww as usize);
                        acc = match red {
                            Red::Max => acc.max(v),
                            Red::Min => acc.min(v),
                            Red::Mean => acc + v,
                        };
                    }
                }
                if let Red::Mean = red {
                    acc /= (self.kh * self.kw) as f64;
                }
                out.push(acc);
            }
        }
        out
    }

    /// NCHW input and output.
    fn nchw(&self, red: Red, x: &[f64], n: usize, c: usize) -> Vec<f64> {
        let mut y = Vec::new();
        for plane in 0..n * c {
            let base = plane * self.h * self.w;
            y.extend(self.plane(red, |a, b| x[base + a * self.w + b]));
        }
        y
    }

    /// NHWC input and output.
    fn nhwc(&self, red: Red, x: &[f64], n: usize, c: usize) -> Vec<f64> {
        let (po, qo) = self.out();
        let mut y = vec![0.0; n * po * qo * c];
        for b in 0..n {
            for ch in 0..c {
                let plane = self.plane(red, |a, w| x[((b * self.h + a) * self.w + w) * c + ch]);
                for (k, v) in plane.into_iter().enumerate() {
                    y[(b * po * qo + k) * c + ch] = v;
                }
            }
        }
        y
    }
}

#[test]
fn pooling_variants_match_naive() {
    let mut rng = StdRng::seed_from_u64(18);
    for &(n, c, h, w) in &[
        (1, 1, 1, 1),
        (2, 3, 7, 5),
        (1, 4, 8, 8),
        (2, 2, 9, 13),
        (1, 16, 16, 16),
        (1, 3, 2, 3),
    ] {
        // All negative: a zero-padded maximum would show at the border.
        let x: Tensor<f32> = random(&[n, c, h, w], -5.0, -1.0, &mut rng);
        let xv = f64s(&x);
        let pool = |kh, kw, sh, sw, ph, pw| Pool {
            h,
            w,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
        };
        let s2p1 = pool(3, 3, 2, 2, 1, 1);
        let same = pool(3, 3, 1, 1, 1, 1);
        for (dev, opts) in devices() {
            let what = |k: &str| format!("{k} {n}x{c}x{h}x{w} on {dev:?}");
            // Channels last: the same data read as [n, h, w, c].
            let xl = x.clone().reshape(&[n, h, w, c]).unwrap();
            let (po, qo) = s2p1.out();
            let mut y = Tensor::<f32>::zeros(&[n, po, qo, c]);
            max_pool_nhwc::with(&opts)(&xl, &mut y).unwrap();
            check(&y, &s2p1.nhwc(Red::Max, &xv, n, c), &what("max_pool_nhwc"));
            let mut y = Tensor::<f32>::zeros(&[n, c, po, qo]);
            avg_pool::with(&opts)(&x, &mut y).unwrap();
            check(&y, &s2p1.nchw(Red::Mean, &xv, n, c), &what("avg_pool"));
            let (po, qo) = same.out();
            let mut y = Tensor::<f32>::zeros(&[n, c, po, qo]);
            max_pool_same::with(&opts)(&x, &mut y).unwrap();
            check(&y, &same.nchw(Red::Max, &xv, n, c), &what("max_pool_same"));
            if h >= 2 && w >= 2 {
                let p2 = pool(2, 2, 2, 2, 0, 0);
                let (po, qo) = p2.out();
                let mut y = Tensor::<f32>::zeros(&[n, c, po, qo]);
                max_pool_2x2::with(&opts)(&x, &mut y).unwrap();
                check(&y, &p2.nchw(Red::Max, &xv, n, c), &what("max_pool_2x2"));
                let mut y = Tensor::<f32>::zeros(&[n, po, qo, c]);
                min_pool_nhwc::with(&opts)(&xl, &mut y).unwrap();
                check(&y, &p2.nhwc(Red::Min, &xv, n, c), &what("min_pool_nhwc"));
            }
            if h >= 2 && w >= 3 {
                let p23 = pool(2, 3, 2, 3, 0, 0);
                let (po, qo) = p23.out();
                let mut y = Tensor::<f32>::zeros(&[n, c, po, qo]);
                max_pool_2x3::with(&opts)(&x, &mut y).unwrap();
                check(&y, &p23.nchw(Red::Max, &xv, n, c), &what("max_pool_2x3"));
            }
            // The first plane alone, as a 2-D pool.
            let plane = Tensor::from_vec(vec![h, w], x.to_f32()[..h * w].to_vec()).unwrap();
            let (po, qo) = s2p1.out();
            let mut y = Tensor::<f32>::zeros(&[po, qo]);
            max_pool_2d::with(&opts)(&plane, &mut y).unwrap();
            check(
                &y,
                &s2p1.nchw(Red::Max, &xv[..h * w], 1, 1),
                &what("max_pool_2d"),
            );
            let xh: Tensor<f16> = Tensor::from_f32(vec![n, c, h, w], &x.to_f32()).unwrap();
            let mut y = Tensor::<f16>::zeros(&[n, c, po, qo]);
            max_pool_f16::with(&opts)(&xh, &mut y).unwrap();
            check(
                &y,
                &s2p1.nchw(Red::Max, &f64s(&xh), n, c),
                &what("max_pool_f16"),
            );
        }
    }
}

#[test]
fn reductions_match_naive() {
    let mut rng = StdRng::seed_from_u64(19);
    for &(rows, cols) in ROWS_COLS {
        let x: Tensor<f32> = random(&[rows, cols], -3.0, 3.0, &mut rng);
        // Near 1, so that a product of 4097 stays finite.
        let xp: Tensor<f32> = random(&[rows, cols], 0.995, 1.005, &mut rng);
        let bias: Tensor<f32> = random(&[rows], -1.0, 1.0, &mut rng);
        let (xv, pv, bv) = (f64s(&x), f64s(&xp), f64s(&bias));
        let row = |i: usize| &xv[i * cols..(i + 1) * cols];
        let max: Vec<f64> = (0..rows)
            .map(|i| row(i).iter().copied().fold(f64::NEG_INFINITY, f64::max))
            .collect();
        let min: Vec<f64> = (0..rows)
            .map(|i| row(i).iter().copied().fold(f64::INFINITY, f64::min))
            .collect();
        let sum: Vec<f64> = (0..rows).map(|i| row(i).iter().sum()).collect();
        let mean: Vec<f64> = sum.iter().map(|s| s / cols as f64).collect();
        let prod: Vec<f64> = (0..rows)
            .map(|i| pv[i * cols..(i + 1) * cols].iter().product())
            .collect();
        let col_min: Vec<f64> = (0..cols)
            .map(|j| {
                (0..rows)
                    .map(|i| xv[i * cols + j])
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        let all_max = xv.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let alpha = -2.5f32;
        let epi: Vec<f64> = (0..rows)
            .map(|i| min[i] * f64::from(alpha) + bv[i])
            .collect();
        let xh: Tensor<f16> = Tensor::from_f32(vec![rows, cols], &x.to_f32()).unwrap();
        let min_h: Vec<f64> = {
            let hv = f64s(&xh);
            (0..rows)
                .map(|i| {
                    hv[i * cols..(i + 1) * cols]
                        .iter()
                        .copied()
                        .fold(f64::INFINITY, f64::min)
                })
                .collect()
        };
        for (dev, opts) in devices() {
            let what = |k: &str| format!("{k} {rows}x{cols} on {dev:?}");
            let mut y = Tensor::<f32>::zeros(&[rows]);
            row_max::with(&opts)(&x, &mut y).unwrap();
            check(&y, &max, &what("row_max"));
            row_sum::with(&opts)(&x, &mut y).unwrap();
            // A sum of thousands of values: absolute error relative to the row's size.
            for (g, w) in y.to_f32().iter().zip(&sum) {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-5 * (1.0 + cols as f64),
                    "{}: {g} vs {w}",
                    what("row_sum")
                );
            }
            row_mean::with(&opts)(&x, &mut y).unwrap();
            check(&y, &mean, &what("row_mean"));
            row_prod::with(&opts)(&xp, &mut y).unwrap();
            for (g, w) in y.to_f32().iter().zip(&prod) {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-5 * (1.0 + cols as f64) * w.abs(),
                    "{}: {g} vs {w}",
                    what("row_prod")
                );
            }
            row_min_epilogue::with(&opts)(&x, &bias, alpha, &mut y).unwrap();
            check(&y, &epi, &what("row_min_epilogue"));
            row_min_f16::with(&opts)(&xh, &mut y).unwrap();
            check(&y, &min_h, &what("row_min_f16"));
            let mut y = Tensor::<f32>::zeros(&[cols]);
            column_min::with(&opts)(&x, &mut y).unwrap();
            check(&y, &col_min, &what("column_min"));
            let mut y = Tensor::<f32>::zeros(&[]);
            full_max::with(&opts)(&x, &mut y).unwrap();
            check(&y, &[all_max], &what("full_max"));
        }
    }
}

#[test]
fn reductions_over_two_indices_match_naive() {
    let mut rng = StdRng::seed_from_u64(20);
    for &(a, b, c) in &[(1, 1, 1), (3, 4, 5), (2, 64, 3), (5, 2, 130)] {
        let x: Tensor<f32> = random(&[a, b, c], -3.0, 3.0, &mut rng);
        let xv = f64s(&x);
        let at = |i: usize, j: usize, k: usize| xv[(i * b + j) * c + k];
        let two: Vec<f64> = (0..a)
            .map(|i| {
                (0..b * c)
                    .map(|jk| at(i, jk / c, jk % c))
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        let outer: Vec<f64> = (0..b)
            .map(|j| {
                (0..a * c)
                    .map(|ik| at(ik / c, j, ik % c))
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        for (dev, opts) in devices() {
            let mut y = Tensor::<f32>::zeros(&[a]);
            min_two::with(&opts)(&x, &mut y).unwrap();
            check(&y, &two, &format!("min_two {a}x{b}x{c} on {dev:?}"));
            let mut y = Tensor::<f32>::zeros(&[b]);
            min_outer::with(&opts)(&x, &mut y).unwrap();
            check(&y, &outer, &format!("min_outer {a}x{b}x{c} on {dev:?}"));
        }
    }
}

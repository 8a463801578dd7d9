//! End-to-end: `#[tensor_kernel(accumulate)]` adds the kernel's result to what the output
//! holds (BLAS's `beta = 1`), epilogues included, on every host device and element type,
//! compared with naive loops written out here. `+=` without the attribute still overwrites.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use common::random;
use rand::{rngs::StdRng, SeedableRng};
use tensor_dsl::{bf16, tensor_kernel, Device, Options, Tensor, TensorView, TensorViewMut};

/// `c ← c + a·b`.
#[tensor_kernel(accumulate)]
fn gemm_acc(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// The same statement without the attribute: einsum's overwrite.
#[tensor_kernel]
fn gemm(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// A residual block: `y ← y + relu(x·w + bias)`, the output declared first.
#[tensor_kernel(accumulate)]
fn residual(y: &mut Tensor<f32>, x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>) {
    y[[i, j]] += x[[i, k]] * w[[k, j]];
    y[[i, j]] = relu(y[[i, j]] + bias[[j]]);
}

/// `bf16` output: the old value is widened, added in `f32`, the sum rounded once.
#[tensor_kernel(accumulate)]
fn axpy_bf16(alpha: f32, x: &Tensor<bf16>, y: &mut Tensor<bf16>) {
    y[[i]] = alpha * x[[i]];
}

/// A parameter already named like the hidden input.
#[tensor_kernel(accumulate)]
fn clash(c_prev: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i]] = 2.0 * c_prev[[i]];
}

fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, m: usize, k: usize, n: usize) -> Vec<f64> {
    let (a, b) = (a.as_slice(), b.as_slice());
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                out[i * n + j] += f64::from(a[i * k + l]) * f64::from(b[l * n + j]);
            }
        }
    }
    out
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (e, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= 1e-4 * w.abs().max(1.0),
            "{what}: element {e}: got {g}, want {w}"
        );
    }
}

const DEVICES: [Device; 2] = [Device::Cpu, Device::Reference];

#[test]
fn gemm_adds_to_the_output_and_plain_plus_equals_overwrites() {
    let mut rng = StdRng::seed_from_u64(7);
    for (m, k, n) in [(1, 1, 1), (7, 13, 17), (64, 48, 33)] {
        let a = random(&mut rng, &[m, k]);
        let b = random(&mut rng, &[k, n]);
        let c0 = random(&mut rng, &[m, n]);
        let ab = matmul(&a, &b, m, k, n);
        let want: Vec<f64> = ab
            .iter()
            .zip(c0.as_slice())
            .map(|(&p, &c)| p + f64::from(c))
            .collect();
        for dev in DEVICES {
            let opts = Options::new().device(dev);
            let mut c = c0.clone();
            gemm_acc::with(&opts)(&a, &b, &mut c).unwrap();
            assert_close(
                c.as_slice(),
                &want,
                &format!("{dev:?} {m}x{k}x{n} accumulate"),
            );
            // Twice: the second call adds a·b again.
            gemm_acc::with(&opts)(&a, &b, &mut c).unwrap();
            let twice: Vec<f64> = want.iter().zip(&ab).map(|(w, p)| w + p).collect();
            assert_close(c.as_slice(), &twice, &format!("{dev:?} {m}x{k}x{n} twice"));
            let mut c = c0.clone();
            gemm::with(&opts)(&a, &b, &mut c).unwrap();
            assert_close(c.as_slice(), &ab, &format!("{dev:?} {m}x{k}x{n} overwrite"));
        }
    }
}

#[test]
fn the_whole_kernel_epilogues_included_is_added() {
    let mut rng = StdRng::seed_from_u64(8);
    let (m, k, n) = (9, 31, 20);
    let x = random(&mut rng, &[m, k]);
    let w = random(&mut rng, &[k, n]);
    let bias = random(&mut rng, &[n]);
    let y0 = random(&mut rng, &[m, n]);
    let xw = matmul(&x, &w, m, k, n);
    let want: Vec<f64> = (0..m * n)
        .map(|e| f64::from(y0.as_slice()[e]) + (xw[e] + f64::from(bias.as_slice()[e % n])).max(0.0))
        .collect();
    for dev in DEVICES {
        let mut y = y0.clone();
        residual::with(&Options::new().device(dev))(&mut y, &x, &w, &bias).unwrap();
        assert_close(y.as_slice(), &want, &format!("{dev:?} residual"));
    }
}

#[test]
fn half_precision_outputs_and_scalars() {
    let x: Vec<f32> = (0..37).map(|v| v as f32 * 0.25 - 3.0).collect();
    let y: Vec<f32> = (0..37).map(|v| 1.0 - v as f32 * 0.125).collect();
    let x = Tensor::<bf16>::from_f32(vec![37], &x).unwrap();
    let y0 = Tensor::<bf16>::from_f32(vec![37], &y).unwrap();
    let want: Vec<f32> = (0..37)
        .map(|e| bf16::from_f32(y0.to_f32()[e] + 0.5 * x.to_f32()[e]).to_f32())
        .collect();
    for dev in DEVICES {
        let mut y = y0.clone();
        axpy_bf16::with(&Options::new().device(dev))(0.5, &x, &mut y).unwrap();
        assert_eq!(y.to_f32(), want, "{dev:?}");
    }
}

#[test]
fn views_and_a_parameter_named_like_the_hidden_input() {
    let prev = [1.0f32, 2.0, 3.0];
    let mut c = [10.0f32, 20.0, 30.0];
    clash::views(
        TensorView::new(&[3], &prev).unwrap(),
        TensorViewMut::new(&[3], &mut c).unwrap(),
    )
    .unwrap();
    assert_eq!(c, [12.0, 24.0, 36.0]);
    let k = clash::kernel();
    let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["c_prev", "c", "c_prev_"]);
}

#[test]
fn the_ir_is_an_ordinary_kernel_with_one_more_input() {
    let k = gemm_acc::kernel();
    assert_eq!(
        k.to_string(),
        "c[[i, j]] += (a[[i, k]] * b[[k, j]]); c[[i, j]] = (c[[i, j]] + c_prev[[i, j]]);"
    );
    assert_ne!(k.fingerprint(), gemm::kernel().fingerprint());
}

/// A kernel of several stages: `y ← y + softmax(x)` by rows.
#[tensor_kernel(accumulate)]
fn softmax_acc(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

#[test]
fn kernels_of_several_stages_accumulate_too() {
    let mut rng = StdRng::seed_from_u64(9);
    let (rows, cols) = (5, 37);
    let x = random(&mut rng, &[rows, cols]);
    let y0 = random(&mut rng, &[rows, cols]);
    let mut want = vec![0.0f64; rows * cols];
    for r in 0..rows {
        let row: Vec<f64> = (0..cols)
            .map(|c| f64::from(x.as_slice()[r * cols + c]))
            .collect();
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for c in 0..cols {
            want[r * cols + c] = f64::from(y0.as_slice()[r * cols + c]) + (row[c] - m).exp() / s;
        }
    }
    for dev in DEVICES {
        let mut y = y0.clone();
        softmax_acc::with(&Options::new().device(dev))(&x, &mut y).unwrap();
        assert_close(y.as_slice(), &want, &format!("{dev:?} softmax"));
    }
}

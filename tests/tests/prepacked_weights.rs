//! End-to-end: a convolution's weights, and a matmul's packed operand, passed as a
//! `Tensor` are packed once and reused while the tensor is unchanged (`Tensor::version`);
//! every change to them, a clone changed on its own, views without a version and more
//! weight tensors than the runtime keeps all give the naive result.
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

/// A 3×3 convolution, padding 1, with a bias and ReLU.
#[tensor_kernel]
fn conv3x3(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]];
    y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);
}

const N: usize = 1;
const C: usize = 19;
const F: usize = 40;
const H: usize = 7;
const W: usize = 7;

fn naive(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>) -> Vec<f64> {
    let (x, w, b) = (x.as_slice(), w.as_slice(), bias.as_slice());
    let mut y = vec![0.0f64; N * F * H * W];
    for n in 0..N {
        for f in 0..F {
            for p in 0..H {
                for q in 0..W {
                    let mut sum = 0.0f64;
                    for c in 0..C {
                        for r in 0..3 {
                            for s in 0..3 {
                                let (i, j) = ((p + r) as i64 - 1, (q + s) as i64 - 1);
                                if i < 0 || j < 0 || i >= H as i64 || j >= W as i64 {
                                    continue;
                                }
                                let xv = x[((n * C + c) * H + i as usize) * W + j as usize];
                                sum += f64::from(xv) * f64::from(w[((f * C + c) * 3 + r) * 3 + s]);
                            }
                        }
                    }
                    y[((n * F + f) * H + p) * W + q] = (sum + f64::from(b[f])).max(0.0);
                }
            }
        }
    }
    y
}

fn check(got: &[f32], want: &[f64], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs naive {w}"
        );
    }
}

#[test]
fn weights_are_repacked_exactly_when_they_change() {
    let mut rng = StdRng::seed_from_u64(3);
    let opts = Options::new().device(Device::Cpu);
    let x = random(&mut rng, &[N, C, H, W]);
    let bias = random(&mut rng, &[F]);
    let mut w = random(&mut rng, &[F, C, 3, 3]);
    let mut y = Tensor::zeros(&[N, F, H, W]);
    let call = |w: &Tensor<f32>, y: &mut Tensor<f32>| conv3x3::with(&opts)(&x, w, &bias, y);

    call(&w, &mut y).unwrap();
    check(y.as_slice(), &naive(&x, &w, &bias), "first call");
    call(&w, &mut y).unwrap();
    check(y.as_slice(), &naive(&x, &w, &bias), "same weights again");

    // Changed in place: a new version, so packed again.
    let before = w.version();
    for v in w.as_mut_slice().iter_mut().step_by(7) {
        *v = -*v;
    }
    assert_ne!(w.version(), before);
    call(&w, &mut y).unwrap();
    check(y.as_slice(), &naive(&x, &w, &bias), "after a change");

    // A clone shares the version until one of them changes.
    let mut w2 = w.clone();
    assert_eq!(w2.version(), w.version());
    w2.as_mut_slice()[0] += 1.0;
    for round in 0..2 {
        call(&w2, &mut y).unwrap();
        check(
            y.as_slice(),
            &naive(&x, &w2, &bias),
            &format!("clone, round {round}"),
        );
        call(&w, &mut y).unwrap();
        check(
            y.as_slice(),
            &naive(&x, &w, &bias),
            &format!("original, round {round}"),
        );
    }

    // The weights as a view (no version; default options): packed at the call.
    let mut wv = w.as_slice().to_vec();
    wv[5] = 3.0;
    let mut out = vec![0.0f32; N * F * H * W];
    conv3x3::views(
        x.view(),
        TensorView::new(&[F, C, 3, 3], &wv).unwrap(),
        bias.view(),
        TensorViewMut::new(&[N, F, H, W], &mut out).unwrap(),
    )
    .unwrap();
    let wt = Tensor::from_vec(vec![F, C, 3, 3], wv).unwrap();
    check(&out, &naive(&x, &wt, &bias), "view");

    // More weight tensors than the runtime keeps packed, cycled twice.
    let many: Vec<Tensor<f32>> = (0..tensor_dsl::runtime::cpu::PREPACK_KEEP + 3)
        .map(|_| random(&mut rng, &[F, C, 3, 3]))
        .collect();
    for round in 0..2 {
        for (i, wi) in many.iter().enumerate() {
            call(wi, &mut y).unwrap();
            check(
                y.as_slice(),
                &naive(&x, wi, &bias),
                &format!("weights {i}, round {round}"),
            );
        }
    }
}

/// A linear layer: `b` is the operand the CPU template packs into panels.
#[tensor_kernel]
fn linear(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// One weight shared by every batch entry (its panels do not depend on `n`).
#[tensor_kernel]
fn shared_weight(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, i, j]] += x[[n, i, k]] * w[[k, j]];
}

/// A weight per batch entry.
#[tensor_kernel]
fn batched(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, i, j]] += x[[n, i, k]] * w[[n, k, j]];
}

/// `bf16` operands: the panels hold the converted values.
#[tensor_kernel]
fn linear_bf16(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// A transposed weight (`b[j, k]`, as a linear layer stores it) with a bias and ReLU.
#[tensor_kernel]
fn linear_nt_bias_relu(a: &Tensor<f32>, b: &Tensor<f32>, bias: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[j, k]];
    c[[i, j]] = relu(c[[i, j]] + bias[[j]]);
}

/// `y[n][i][j] = Σ_k x[n][i][k] · w[n or 0][k][j]`.
fn naive_bmm(x: &[f32], w: &[f32], dims: (usize, usize, usize, usize), shared: bool) -> Vec<f64> {
    let (nb, m, k, n) = dims;
    let mut y = vec![0.0f64; nb * m * n];
    for b in 0..nb {
        let wb = if shared { 0 } else { b * k * n };
        for i in 0..m {
            for j in 0..n {
                y[(b * m + i) * n + j] = (0..k)
                    .map(|t| f64::from(x[(b * m + i) * k + t]) * f64::from(w[wb + t * n + j]))
                    .sum();
            }
        }
    }
    y
}

/// Matmuls take their packed operand prepacked too: odd extents (partial vector and unroll
/// tiles), a weight shared across a batch index, a weight per batch entry, `bf16`; the
/// weight changed in place and cycled past what the runtime keeps.
#[test]
fn matmul_panels_are_packed_once_per_version() {
    let mut rng = StdRng::seed_from_u64(5);
    let opts = Options::new().device(Device::Cpu);
    for (m, k, n) in [(37, 300, 50), (8, 64, 16), (5, 7, 33)] {
        let a = random(&mut rng, &[m, k]);
        let mut b = random(&mut rng, &[k, n]);
        let mut c = Tensor::zeros(&[m, n]);
        for round in 0..3 {
            linear::with(&opts)(&a, &b, &mut c).unwrap();
            let want = naive_bmm(a.as_slice(), b.as_slice(), (1, m, k, n), true);
            check(c.as_slice(), &want, &format!("{m}x{k}x{n}, round {round}"));
            if round == 1 {
                b.as_mut_slice()[3] -= 2.0;
            }
        }
        // More weights than the runtime keeps packed.
        let many: Vec<Tensor<f32>> = (0..tensor_dsl::runtime::cpu::PREPACK_KEEP + 2)
            .map(|_| random(&mut rng, &[k, n]))
            .collect();
        for (i, bi) in many.iter().chain(many.iter()).enumerate() {
            linear::with(&opts)(&a, bi, &mut c).unwrap();
            let want = naive_bmm(a.as_slice(), bi.as_slice(), (1, m, k, n), true);
            check(c.as_slice(), &want, &format!("{m}x{k}x{n}, weights {i}"));
        }
    }

    let (nb, m, k, n) = (3, 9, 20, 21);
    let x = random(&mut rng, &[nb, m, k]);
    let w = random(&mut rng, &[k, n]);
    let mut y = Tensor::zeros(&[nb, m, n]);
    for round in 0..2 {
        shared_weight::with(&opts)(&x, &w, &mut y).unwrap();
        let want = naive_bmm(x.as_slice(), w.as_slice(), (nb, m, k, n), true);
        check(
            y.as_slice(),
            &want,
            &format!("shared weight, round {round}"),
        );
    }
    let mut wb = random(&mut rng, &[nb, k, n]);
    for round in 0..3 {
        batched::with(&opts)(&x, &wb, &mut y).unwrap();
        let want = naive_bmm(x.as_slice(), wb.as_slice(), (nb, m, k, n), false);
        check(y.as_slice(), &want, &format!("batched, round {round}"));
        wb.as_mut_slice()[k * n + 1] += 1.0;
    }

    // Transposed weight, bias and ReLU: whichever operand the kernel packs, versions kept.
    let (m, k, n) = (19, 70, 45);
    let a = random(&mut rng, &[m, k]);
    let mut bt = random(&mut rng, &[n, k]);
    let bias = random(&mut rng, &[n]);
    let mut c = Tensor::zeros(&[m, n]);
    for round in 0..3 {
        linear_nt_bias_relu::with(&opts)(&a, &bt, &bias, &mut c).unwrap();
        let mut want = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|t| {
                        f64::from(a.as_slice()[i * k + t]) * f64::from(bt.as_slice()[j * k + t])
                    })
                    .sum();
                want[i * n + j] = (dot + f64::from(bias.as_slice()[j])).max(0.0);
            }
        }
        check(
            c.as_slice(),
            &want,
            &format!("transposed weight, round {round}"),
        );
        bt.as_mut_slice()[k + 2] -= 1.5;
    }

    let to_bf16 = |t: &Tensor<f32>| {
        let v: Vec<bf16> = t.as_slice().iter().map(|&x| bf16::from_f32(x)).collect();
        Tensor::from_vec(t.shape().to_vec(), v).unwrap()
    };
    let (a, b) = (random(&mut rng, &[13, 40]), random(&mut rng, &[40, 30]));
    let (ah, bh) = (to_bf16(&a), to_bf16(&b));
    let round_trip =
        |t: &Tensor<bf16>| -> Vec<f32> { t.as_slice().iter().map(|v| v.to_f32()).collect() };
    let mut c = Tensor::zeros(&[13, 30]);
    for round in 0..2 {
        linear_bf16::with(&opts)(&ah, &bh, &mut c).unwrap();
        let want = naive_bmm(&round_trip(&ah), &round_trip(&bh), (1, 13, 40, 30), true);
        check(c.as_slice(), &want, &format!("bf16, round {round}"));
    }
}

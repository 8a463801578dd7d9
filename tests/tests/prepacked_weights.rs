//! End-to-end: a convolution's weights passed as a `Tensor` are packed once and reused
//! while the tensor is unchanged (`Tensor::version`); every change to them, a clone
//! changed on its own, views without a version and more weight tensors than the runtime
//! keeps all give the naive result.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use common::random;
use rand::{rngs::StdRng, SeedableRng};
use tensor_dsl::{tensor_kernel, Device, Options, Tensor, TensorView, TensorViewMut};

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

//! End-to-end: kernels written only against the public contract (DESIGN.md), run on every
//! device, compared with naive loops written out by hand here (not with our interpreter).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

use rand::{rngs::StdRng, Rng, SeedableRng};
use tensor_dsl::{tensor_kernel, Device, Error, Options, Tensor};

#[tensor_kernel]
fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// Output first, transposed operands.
#[tensor_kernel]
fn matmul_tt(c: &mut Tensor<f32>, a: &Tensor<f32>, b: &Tensor<f32>) {
    c[[i, j]] += a[[k, i]] * b[[j, k]];
}

#[tensor_kernel]
fn batched(x: &Tensor<f32>, y: &Tensor<f32>, z: &mut Tensor<f32>) {
    z[[b, m, n]] += x[[b, k, m]] * y[[b, k, n]];
}

#[tensor_kernel]
fn dot(x: &Tensor<f32>, y: &Tensor<f32>, s: &mut Tensor<f32>) {
    s[[]] += x[[i]] * y[[i]];
}

#[tensor_kernel]
fn trace(a: &Tensor<f32>, t: &mut Tensor<f32>) {
    t[[]] += a[[i, i]];
}

#[tensor_kernel]
fn outer(a: &Tensor<f32>, b: &Tensor<f32>, o: &mut Tensor<f32>) {
    o[[i, j]] = a[[i]] * b[[j]];
}

#[tensor_kernel]
fn chain3(a: &Tensor<f32>, b: &Tensor<f32>, c: &Tensor<f32>, d: &Tensor<f32>, o: &mut Tensor<f32>) {
    o[[i]] += a[[i, j]] * b[[j, l]] * c[[l]] * d[[i]];
}

#[tensor_kernel]
fn conv_bias_relu(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]];
    y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);
}

#[tensor_kernel]
fn gelu_mm(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
    c[[i, j]] = gelu(c[[i, j]]) * 2.0 - sigmoid(c[[i, j]]) + max(tanh(c[[i, j]]), 0.1);
}

fn rand_tensor(rng: &mut StdRng, shape: &[usize]) -> Tensor<f32> {
    let n = shape.iter().product();
    Tensor::from_vec(
        shape.to_vec(),
        (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect(),
    )
    .unwrap()
}

fn assert_close(got: &Tensor<f32>, want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (n, (g, w)) in got.as_slice().iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "{what}: element {n}: got {g}, want {w}"
        );
    }
}

const DEVICES: [Device; 2] = [Device::Cpu, Device::Reference];

/// Exact GELU via a high-precision erf (Abramowitz–Stegun 7.1.26 is not enough at 1e-4).
fn erf(x: f64) -> f64 {
    // Numerical Recipes erfc (Chebyshev), |error| < 1.2e-7.
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 {
        1.0 - r
    } else {
        r - 1.0
    }
}

#[test]
fn matmuls_on_prime_and_awkward_shapes() {
    let mut rng = StdRng::seed_from_u64(1);
    for (m, k, n) in [
        (1, 1, 1),
        (7, 13, 17),
        (31, 1, 5),
        (64, 64, 64),
        (3, 97, 2),
        (33, 65, 129),
    ] {
        let a = rand_tensor(&mut rng, &[m, k]);
        let b = rand_tensor(&mut rng, &[k, n]);
        let mut want = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for l in 0..k {
                    s += f64::from(a.as_slice()[i * k + l]) * f64::from(b.as_slice()[l * n + j]);
                }
                want[i * n + j] = s as f32;
            }
        }
        // The transposed kernel reads a as k×m and b as n×k.
        let mut at = vec![0.0f32; k * m];
        let mut bt = vec![0.0f32; n * k];
        for i in 0..m {
            for l in 0..k {
                at[l * m + i] = a.as_slice()[i * k + l];
            }
        }
        for l in 0..k {
            for j in 0..n {
                bt[j * k + l] = b.as_slice()[l * n + j];
            }
        }
        let at = Tensor::from_vec(vec![k, m], at).unwrap();
        let bt = Tensor::from_vec(vec![n, k], bt).unwrap();
        for dev in DEVICES {
            let opts = Options::new().device(dev);
            let mut c = Tensor::zeros(&[m, n]);
            matmul::with(&opts)(&a, &b, &mut c).unwrap();
            assert_close(&c, &want, &format!("matmul {m}x{k}x{n} on {dev}"));
            let mut c = Tensor::from_vec(vec![m, n], vec![123.0; m * n]).unwrap(); // overwritten, not accumulated
            matmul_tt::with(&opts)(&mut c, &at, &bt).unwrap();
            assert_close(&c, &want, &format!("matmul_tt {m}x{k}x{n} on {dev}"));
        }
    }
}

#[test]
fn batched_transposed_matmul() {
    let mut rng = StdRng::seed_from_u64(2);
    let (bs, m, n, k) = (3, 5, 7, 11);
    let x = rand_tensor(&mut rng, &[bs, k, m]);
    let y = rand_tensor(&mut rng, &[bs, k, n]);
    let mut want = vec![0.0f32; bs * m * n];
    for b in 0..bs {
        for i in 0..m {
            for j in 0..n {
                want[(b * m + i) * n + j] = (0..k)
                    .map(|l| x.as_slice()[(b * k + l) * m + i] * y.as_slice()[(b * k + l) * n + j])
                    .sum();
            }
        }
    }
    for dev in DEVICES {
        let mut z = Tensor::zeros(&[bs, m, n]);
        batched::with(&Options::new().device(dev))(&x, &y, &mut z).unwrap();
        assert_close(&z, &want, &format!("batched on {dev}"));
    }
}

#[test]
fn scalars_diagonals_outer_and_chains() {
    let mut rng = StdRng::seed_from_u64(3);
    let x = rand_tensor(&mut rng, &[101]);
    let y = rand_tensor(&mut rng, &[101]);
    let sq = rand_tensor(&mut rng, &[13, 13]);
    let (a, b, c, d) = (
        rand_tensor(&mut rng, &[6, 5]),
        rand_tensor(&mut rng, &[5, 4]),
        rand_tensor(&mut rng, &[4]),
        rand_tensor(&mut rng, &[6]),
    );
    let want_dot: f32 = x
        .as_slice()
        .iter()
        .zip(y.as_slice())
        .map(|(a, b)| a * b)
        .sum();
    let want_trace: f32 = (0..13).map(|i| sq.as_slice()[i * 13 + i]).sum();
    let want_outer: Vec<f32> = (0..101 * 101)
        .map(|n| x.as_slice()[n / 101] * y.as_slice()[n % 101])
        .collect();
    let want_chain: Vec<f32> = (0..6)
        .map(|i| {
            let mut s = 0.0;
            for j in 0..5 {
                for l in 0..4 {
                    s += a.as_slice()[i * 5 + j] * b.as_slice()[j * 4 + l] * c.as_slice()[l];
                }
            }
            s * d.as_slice()[i]
        })
        .collect();
    for dev in DEVICES {
        let opts = Options::new().device(dev);
        let mut s = Tensor::zeros(&[]);
        dot::with(&opts)(&x, &y, &mut s).unwrap();
        assert_close(&s, &[want_dot], &format!("dot on {dev}"));
        trace::with(&opts)(&sq, &mut s).unwrap();
        assert_close(&s, &[want_trace], &format!("trace on {dev}"));
        let mut o = Tensor::zeros(&[101, 101]);
        outer::with(&opts)(&x, &y, &mut o).unwrap();
        assert_close(&o, &want_outer, &format!("outer on {dev}"));
        let mut o = Tensor::zeros(&[6]);
        chain3::with(&opts)(&a, &b, &c, &d, &mut o).unwrap();
        assert_close(&o, &want_chain, &format!("chain3 on {dev}"));
    }
}

#[test]
fn strided_padded_convolution_with_epilogue() {
    let mut rng = StdRng::seed_from_u64(4);
    let (nb, ch, h, w_, f, r, s) = (2, 3, 11, 9, 5, 3, 3);
    let (ph, pw) = ((h + 2 - r) / 2 + 1, (w_ + 2 - s) / 2 + 1);
    let x = rand_tensor(&mut rng, &[nb, ch, h, w_]);
    let w = rand_tensor(&mut rng, &[f, ch, r, s]);
    let bias = rand_tensor(&mut rng, &[f]);
    let mut want = vec![0.0f32; nb * f * ph * pw];
    for n in 0..nb {
        for o in 0..f {
            for p in 0..ph {
                for q in 0..pw {
                    let mut acc = 0.0f32;
                    for c in 0..ch {
                        for i in 0..r {
                            for j in 0..s {
                                let (y, xx) =
                                    (2 * p as i64 + i as i64 - 1, 2 * q as i64 + j as i64 - 1);
                                if y >= 0 && xx >= 0 && (y as usize) < h && (xx as usize) < w_ {
                                    acc += x.as_slice()
                                        [((n * ch + c) * h + y as usize) * w_ + xx as usize]
                                        * w.as_slice()[((o * ch + c) * r + i) * s + j];
                                }
                            }
                        }
                    }
                    want[((n * f + o) * ph + p) * pw + q] = (acc + bias.as_slice()[o]).max(0.0);
                }
            }
        }
    }
    for dev in DEVICES {
        let mut y = Tensor::zeros(&[nb, f, ph, pw]);
        conv_bias_relu::with(&Options::new().device(dev))(&x, &w, &bias, &mut y).unwrap();
        assert_close(&y, &want, &format!("conv on {dev}"));
    }
}

#[test]
fn epilogue_builtins() {
    let mut rng = StdRng::seed_from_u64(5);
    let a = rand_tensor(&mut rng, &[9, 20]);
    let b = rand_tensor(&mut rng, &[20, 7]);
    let want: Vec<f32> = (0..63)
        .map(|n| {
            let (i, j) = (n / 7, n % 7);
            let c: f64 = (0..20)
                .map(|l| f64::from(a.as_slice()[i * 20 + l]) * f64::from(b.as_slice()[l * 7 + j]))
                .sum();
            let gelu = 0.5 * c * (1.0 + erf(c / 2f64.sqrt()));
            let sig = 1.0 / (1.0 + (-c).exp());
            (gelu * 2.0 - sig + c.tanh().max(0.1)) as f32
        })
        .collect();
    for dev in DEVICES {
        let mut c = Tensor::zeros(&[9, 7]);
        gelu_mm::with(&Options::new().device(dev))(&a, &b, &mut c).unwrap();
        assert_close(&c, &want, &format!("gelu_mm on {dev}"));
    }
}

#[test]
fn shape_errors_are_errors_naming_tensor_and_index() {
    let a = Tensor::<f32>::zeros(&[4, 5]);
    let b = Tensor::<f32>::zeros(&[6, 3]);
    let mut c = Tensor::<f32>::zeros(&[4, 3]);
    for dev in DEVICES {
        let opts = Options::new().device(dev);
        let e = matmul::with(&opts)(&a, &b, &mut c).unwrap_err().to_string();
        assert!(e.contains("`k`") && e.contains("`b`"), "{e}");
        let b = Tensor::<f32>::zeros(&[5, 3]);
        let mut wrong = Tensor::<f32>::zeros(&[4, 4]);
        let e = matmul::with(&opts)(&a, &b, &mut wrong)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`j`") && e.contains("`c`"), "{e}");
        let rank3 = Tensor::<f32>::zeros(&[4, 5, 1]);
        let e = matmul::with(&opts)(&rank3, &b, &mut c).unwrap_err();
        assert!(matches!(e, Error::Shape(_)), "{e}");
        assert!(e.to_string().contains("`a`"), "{e}");
        let empty = Tensor::<f32>::zeros(&[4, 0]);
        let e = matmul::with(&opts)(&empty, &b, &mut c)
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty") && e.contains("`a`"), "{e}");
        let sq = Tensor::<f32>::zeros(&[3, 4]);
        let mut t = Tensor::<f32>::zeros(&[]);
        let e = trace::with(&opts)(&sq, &mut t).unwrap_err().to_string();
        assert!(e.contains("`i`"), "{e}");
    }
    assert!(Tensor::from_vec(vec![2, 2], vec![1.0f32; 5]).is_err());
}

#[test]
fn default_device_and_ir() {
    let a = Tensor::from_vec(vec![1, 2], vec![1.0f32, 2.0]).unwrap();
    let b = Tensor::from_vec(vec![2, 1], vec![3.0f32, 4.0]).unwrap();
    let mut c = Tensor::zeros(&[1, 1]);
    matmul(&a, &b, &mut c).unwrap();
    assert_eq!(c.as_slice(), &[11.0]);
    let k = matmul::kernel();
    assert_eq!(k.name, "matmul");
    assert_eq!(
        k.fingerprint(),
        tensor_dsl::ir::parse_text("x", "z[[p, q]] += u[[p, r]] * v[[r, q]]", None)
            .unwrap()
            .fingerprint()
    );
}

/// An `Error` returned from `main` prints as its message (Rust prints `Error: {:?}`).
#[test]
fn errors_debug_print_as_their_message() {
    let a = Tensor::<f32>::zeros(&[4, 8]);
    let b = Tensor::<f32>::zeros(&[7, 2]);
    let mut c = Tensor::<f32>::zeros(&[4, 2]);
    let e: Error = matmul(&a, &b, &mut c).unwrap_err();
    assert_eq!(format!("{e:?}"), e.to_string());
    assert!(e.to_string().starts_with("kernel `matmul`"), "{e}");
}

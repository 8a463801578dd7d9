//! End-to-end: half-precision kernels written against the public contract (`Tensor<bf16>`,
//! `Tensor<f16>`, mixed with `f32`), on the CPU and the reference interpreter, compared with
//! naive loops written out here: inputs widened exactly, products summed in `f64`, the
//! output rounded once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

use rand::{rngs::StdRng, Rng, SeedableRng};
use tensor_dsl::{bf16, f16, tensor_kernel, Device, Element, Options, Tensor};

/// `bf16` operands, `f32` bias and output (the tensor-core layout).
#[tensor_kernel]
fn linear_bf16(a: &Tensor<bf16>, b: &Tensor<bf16>, bias: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
    c[[i, j]] = relu(c[[i, j]] + bias[[j]]);
}

/// Everything `f16`.
#[tensor_kernel]
fn matmul_f16(a: &Tensor<f16>, b: &Tensor<f16>, c: &mut Tensor<f16>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// Batched, transposed left operand, `f16` in, `bf16` out.
#[tensor_kernel]
fn batched_mixed(x: &Tensor<f16>, y: &Tensor<f16>, z: &mut Tensor<bf16>) {
    z[[b, m, n]] += x[[b, k, m]] * y[[b, k, n]];
}

/// A padded convolution with `bf16` data and `f32` weights.
#[tensor_kernel]
fn conv_bf16(x: &Tensor<bf16>, w: &Tensor<f32>, y: &mut Tensor<bf16>) {
    y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]];
}

fn random<T: Element>(shape: &[usize], rng: &mut StdRng) -> Tensor<T> {
    let n = shape.iter().product::<usize>();
    let values: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
    Tensor::from_f32(shape.to_vec(), &values).unwrap()
}

/// Within two units in the last place of `T` (plus f32 summation noise).
fn check<T: Element>(got: &Tensor<T>, want: &[f64], what: &str) {
    let tol = match T::DTYPE {
        tensor_dsl::ir::DType::F32 => 1e-4,
        d => tensor_dsl::measure::tolerance(d) as f64 + 1e-4,
    };
    for (n, (g, w)) in got.to_f32().iter().zip(want).enumerate() {
        let g = f64::from(*g);
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {n}: got {g}, expected {w}"
        );
    }
}

fn devices() -> Vec<(&'static str, Options)> {
    vec![
        ("cpu", Options::new().device(Device::Cpu)),
        ("reference", Options::new().device(Device::Reference)),
    ]
}

#[test]
fn bf16_inputs_f32_output_with_epilogue_at_prime_extents() {
    let mut rng = StdRng::seed_from_u64(1);
    for (m, n, k) in [(7, 13, 31), (1, 1, 1), (37, 61, 67), (64, 48, 96)] {
        let a: Tensor<bf16> = random(&[m, k], &mut rng);
        let b: Tensor<bf16> = random(&[k, n], &mut rng);
        let bias: Tensor<f32> = random(&[n], &mut rng);
        let mut want = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for l in 0..k {
                    s += f64::from(a.as_slice()[i * k + l].to_f32())
                        * f64::from(b.as_slice()[l * n + j].to_f32());
                }
                want[i * n + j] = (s + f64::from(bias.as_slice()[j])).max(0.0);
            }
        }
        for (name, opts) in devices() {
            let mut c = Tensor::<f32>::zeros(&[m, n]);
            linear_bf16::with(&opts)(&a, &b, &bias, &mut c).unwrap();
            check(&c, &want, &format!("{name} {m}x{n}x{k}"));
        }
    }
}

#[test]
fn all_f16_and_mixed_batched() {
    let mut rng = StdRng::seed_from_u64(2);
    let (m, n, k) = (29, 17, 43);
    let a: Tensor<f16> = random(&[m, k], &mut rng);
    let b: Tensor<f16> = random(&[k, n], &mut rng);
    let mut want = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                want[i * n + j] += f64::from(a.as_slice()[i * k + l].to_f32())
                    * f64::from(b.as_slice()[l * n + j].to_f32());
            }
        }
    }
    for (name, opts) in devices() {
        let mut c = Tensor::<f16>::zeros(&[m, n]);
        matmul_f16::with(&opts)(&a, &b, &mut c).unwrap();
        check(&c, &want, &format!("{name} f16 matmul"));
    }

    let (bs, m, n, k) = (3, 11, 5, 19);
    let x: Tensor<f16> = random(&[bs, k, m], &mut rng);
    let y: Tensor<f16> = random(&[bs, k, n], &mut rng);
    let mut want = vec![0.0f64; bs * m * n];
    for b in 0..bs {
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    want[(b * m + i) * n + j] +=
                        f64::from(x.as_slice()[(b * k + l) * m + i].to_f32())
                            * f64::from(y.as_slice()[(b * k + l) * n + j].to_f32());
                }
            }
        }
    }
    for (name, opts) in devices() {
        let mut z = Tensor::<bf16>::zeros(&[bs, m, n]);
        batched_mixed::with(&opts)(&x, &y, &mut z).unwrap();
        check(&z, &want, &format!("{name} batched f16->bf16"));
    }
}

#[test]
fn bf16_convolution_reads_zero_padding() {
    let mut rng = StdRng::seed_from_u64(3);
    let (nb, c, h, w, f) = (2, 3, 7, 5, 4);
    let x: Tensor<bf16> = random(&[nb, c, h, w], &mut rng);
    let wt: Tensor<f32> = random(&[f, c, 3, 3], &mut rng);
    let mut want = vec![0.0f64; nb * f * h * w];
    for n in 0..nb {
        for o in 0..f {
            for p in 0..h {
                for q in 0..w {
                    let mut s = 0.0f64;
                    for ci in 0..c {
                        for r in 0..3 {
                            for t in 0..3 {
                                let (y, z) = (p as i64 + r as i64 - 1, q as i64 + t as i64 - 1);
                                if y < 0 || z < 0 || y >= h as i64 || z >= w as i64 {
                                    continue;
                                }
                                let xi = ((n * c + ci) * h + y as usize) * w + z as usize;
                                s += f64::from(x.as_slice()[xi].to_f32())
                                    * f64::from(wt.as_slice()[((o * c + ci) * 3 + r) * 3 + t]);
                            }
                        }
                    }
                    want[((n * f + o) * h + p) * w + q] = s;
                }
            }
        }
    }
    for (name, opts) in devices() {
        let mut y = Tensor::<bf16>::zeros(&[nb, f, h, w]);
        conv_bf16::with(&opts)(&x, &wt, &mut y).unwrap();
        check(&y, &want, &format!("{name} bf16 conv"));
    }
}

/// The IR records each parameter's element type, and the fingerprint tells kernels apart
/// by it (records of an `f32` matmul are never used for a `bf16` one).
#[test]
fn element_types_are_part_of_the_ir_and_fingerprint() {
    let k = linear_bf16::kernel();
    assert_eq!(k.dtypes_text(), "a=bf16,b=bf16,bias=f32,c=f32");
    assert_ne!(
        matmul_f16::kernel().fingerprint(),
        matmul_f16::kernel()
            .with_dtypes("a=f32,b=f32,c=f32")
            .unwrap()
            .fingerprint()
    );
}

/// `name::views` runs on borrowed data of the declared types (no `Tensor` needed), and a
/// view whose data does not fit its shape is an error, not a panic.
#[test]
fn views_call_on_borrowed_half_data() {
    use tensor_dsl::{TensorView, TensorViewMut};
    let a: Vec<f16> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let b: Vec<f16> = [1.0f32, 0.0, 0.0, 1.0]
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let mut c = vec![f16::ZERO; 4];
    matmul_f16::views(
        TensorView::new(&[2, 2], &a).unwrap(),
        TensorView::new(&[2, 2], &b).unwrap(),
        TensorViewMut::new(&[2, 2], &mut c).unwrap(),
    )
    .unwrap();
    assert_eq!(c, a);
    assert!(TensorView::new(&[3, 2], &a).is_err());
    let t = Tensor::from_slice(&[4], &a)
        .unwrap()
        .reshape(&[2, 2])
        .unwrap();
    assert_eq!(t.view().as_slice(), &a[..]);
}

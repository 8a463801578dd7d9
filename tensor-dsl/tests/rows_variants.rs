//! Variants of the documented kernels of several stages that `rows.rs` and the end-to-end
//! `stages.rs` do not write, each checked against naive loops in `f64` written out here
//! (not against the reference interpreter) on every path:
//!
//! * the CPU backend (`dispatch::call`, the default schedule), one more point of the row
//!   template's CPU space, and the reference interpreter;
//! * the CUDA code on the CPU emulator (`tests/cuda_emu.h`, needs `g++`): the default, random
//!   points of the GPU space tuning searches and a fixed one;
//! * the CUDA code through the real NVRTC and `ptxas` (skipped without them unless
//!   `TENSOR_DSL_REQUIRE_NVRTC=1`).
//!
//! The variants: max pooling channels-last, 2x2 stride 2 without padding, 3x3 stride 1
//! "same", a 2x3 window, 2-D and 1-D pools, a window wholly in the padding, min and mean
//! pooling, mixed half-precision types; softmax over a 3-D or 4-D tensor, over the first or
//! a middle axis, with a temperature scalar, log-softmax, large inputs (1000 + noise), −∞
//! entries, `f16` in / `f32` out and `f32` in / `bf16` out, the division as an epilogue, a
//! transposed output, log-sum-exp as a reduction with an epilogue; layer norm without and
//! with only a scale, `0.00001`, the variance as E[x²] − E[x]² in a statement of its own,
//! over `[b, t, d]`, in `f16`; RMS norm with `sqrt` and a division and `(1.0 + g)`, in
//! `f16`; batch and instance norm; row max, sum, product, mean, column min, a minimum over
//! two indices, full reductions to rank 0, a row minimum with an epilogue, a variance and a
//! standard deviation as reductions; at 1 row, 1 column, 1x1, primes, 16, 32, 64 and 4097
//! points.
//!
//! Also kept: a kernel that GCC 12 miscompiled in the scalar serial configuration (a
//! reduction whose reads are checked against the row index), and the documented limits that
//! must be clear errors rather than panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Case;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use tensor_dsl::ir::DType;
use tensor_dsl::template::rows::{RowPlan, RowsCpuConfig, RowsGpuConfig};
use tensor_dsl::{Buffer, Device, Options, TensorMut, TensorRef};

// ---------------------------------------------------------------------------------------
// Naive computations.

#[derive(Clone, Copy, Debug)]
enum Red {
    Max,
    Min,
    Sum,
    Mean,
    Prod,
}

impl Red {
    fn identity(self) -> f64 {
        match self {
            Red::Max => f64::NEG_INFINITY,
            Red::Min => f64::INFINITY,
            Red::Sum | Red::Mean => 0.0,
            Red::Prod => 1.0,
        }
    }

    fn fold(self, acc: f64, v: f64) -> f64 {
        match self {
            Red::Max => acc.max(v),
            Red::Min => acc.min(v),
            Red::Sum | Red::Mean => acc + v,
            Red::Prod => acc * v,
        }
    }

    /// The reduced value of `count` points (the mean divides by all of them).
    fn finish(self, acc: f64, count: usize) -> f64 {
        match self {
            Red::Mean => acc / count as f64,
            _ => acc,
        }
    }
}

/// Where element `flat` of a row-major tensor of `shape` falls in the row-major tensor of
/// the axes not in `over`.
fn kept(flat: usize, shape: &[usize], over: &[usize]) -> usize {
    let mut rem = flat;
    let mut coords = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        coords[a] = rem % shape[a];
        rem /= shape[a];
    }
    (0..shape.len())
        .filter(|a| !over.contains(a))
        .fold(0, |o, a| o * shape[a] + coords[a])
}

/// `x` (row-major, `shape`) reduced over the axes `over`, row-major over the others.
fn reduce(x: &[f64], shape: &[usize], over: &[usize], red: Red) -> Vec<f64> {
    let n_out: usize = (0..shape.len())
        .filter(|a| !over.contains(a))
        .map(|a| shape[a])
        .product();
    let mut acc = vec![red.identity(); n_out];
    for (flat, &v) in x.iter().enumerate() {
        let o = kept(flat, shape, over);
        acc[o] = red.fold(acc[o], v);
    }
    let count = over.iter().map(|&a| shape[a]).product();
    acc.into_iter().map(|a| red.finish(a, count)).collect()
}

/// Softmax over the axes `over`, from its definition.
fn softmax(x: &[f64], shape: &[usize], over: &[usize]) -> Vec<f64> {
    let m = reduce(x, shape, over, Red::Max);
    let e: Vec<f64> = (0..x.len())
        .map(|f| (x[f] - m[kept(f, shape, over)]).exp())
        .collect();
    let s = reduce(&e, shape, over, Red::Sum);
    (0..x.len())
        .map(|f| e[f] / s[kept(f, shape, over)])
        .collect()
}

/// `log(softmax)` over the last axis: `x − m − log(Σ exp(x − m))`.
fn log_softmax(x: &[f64], shape: &[usize]) -> Vec<f64> {
    let over = [shape.len() - 1];
    let m = reduce(x, shape, &over, Red::Max);
    let e: Vec<f64> = (0..x.len())
        .map(|f| (x[f] - m[kept(f, shape, &over)]).exp())
        .collect();
    let s = reduce(&e, shape, &over, Red::Sum);
    (0..x.len())
        .map(|f| {
            let r = kept(f, shape, &over);
            x[f] - m[r] - s[r].ln()
        })
        .collect()
}

/// `(x − mean) / sqrt(var + eps)` over the axes `over` (biased variance, two passes).
fn normalize(x: &[f64], shape: &[usize], over: &[usize], eps: f64) -> Vec<f64> {
    let mu = reduce(x, shape, over, Red::Mean);
    let d2: Vec<f64> = (0..x.len())
        .map(|f| (x[f] - mu[kept(f, shape, over)]).powi(2))
        .collect();
    let var = reduce(&d2, shape, over, Red::Mean);
    (0..x.len())
        .map(|f| {
            let r = kept(f, shape, over);
            (x[f] - mu[r]) / (var[r] + eps).sqrt()
        })
        .collect()
}

/// `x / sqrt(mean(x²) + eps)` over the last axis.
fn rms(x: &[f64], shape: &[usize], eps: f64) -> Vec<f64> {
    let over = [shape.len() - 1];
    let sq: Vec<f64> = x.iter().map(|v| v * v).collect();
    let ms = reduce(&sq, shape, &over, Red::Mean);
    (0..x.len())
        .map(|f| x[f] / (ms[kept(f, shape, &over)] + eps).sqrt())
        .collect()
}

/// A pooling: `kh x kw` windows, strides `sh, sw`, padding `ph, pw` (points outside the
/// image are left out; the mean divides by the whole window), over NCHW or NHWC data.
#[derive(Clone, Copy)]
struct Pool {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    nhwc: bool,
}

impl Pool {
    fn out(&self) -> (usize, usize) {
        (
            (self.h + 2 * self.ph - self.kh) / self.sh + 1,
            (self.w + 2 * self.pw - self.kw) / self.sw + 1,
        )
    }

    fn run(&self, x: &[f64], red: Red) -> Vec<f64> {
        let (po, qo) = self.out();
        let (n, c, h, w) = (self.n, self.c, self.h, self.w);
        let at = |b: usize, ch: usize, i: usize, j: usize| {
            if self.nhwc {
                ((b * h + i) * w + j) * c + ch
            } else {
                ((b * c + ch) * h + i) * w + j
            }
        };
        let mut y = vec![0.0; n * c * po * qo];
        for b in 0..n {
            for ch in 0..c {
                for p in 0..po {
                    for q in 0..qo {
                        let mut acc = red.identity();
                        for r in 0..self.kh {
                            for s in 0..self.kw {
                                let i = (p * self.sh + r) as i64 - self.ph as i64;
                                let j = (q * self.sw + s) as i64 - self.pw as i64;
                                if i >= 0 && j >= 0 && (i as usize) < h && (j as usize) < w {
                                    acc = red.fold(acc, x[at(b, ch, i as usize, j as usize)]);
                                }
                            }
                        }
                        let o = if self.nhwc {
                            ((b * po + p) * qo + q) * c + ch
                        } else {
                            ((b * c + ch) * po + p) * qo + q
                        };
                        y[o] = red.finish(acc, self.kh * self.kw);
                    }
                }
            }
        }
        y
    }
}

// ---------------------------------------------------------------------------------------
// The variants.

/// How an input is filled.
#[derive(Clone, Copy)]
enum Fill {
    Uniform(f32, f32),
    /// Uniform in [-3, 3) with every third element −∞.
    MinusInfinity,
}

type Naive = Box<dyn Fn(&[Vec<f64>]) -> Vec<f64> + Send + Sync>;

struct Variant {
    name: String,
    case: Case,
    extents: Vec<usize>,
    /// Every parameter's data (the output's empty); scalars hold 0.7.
    data: Vec<Buffer>,
    want: Vec<f64>,
    /// Relative tolerance for an `f32` output (half-precision outputs add two units in the
    /// last place).
    tol: f64,
}

/// Kernel text, shapes (as in a case file), element types, input filling, `f32` tolerance
/// and the naive computation (the parameters' values in order, the output's empty).
type Spec = (&'static str, String, &'static str, Fill, f64, Naive);

fn x_shape(shapes: &str) -> Vec<usize> {
    let x = shapes.split_whitespace().next().unwrap();
    let dims = x.split_once('=').unwrap().1;
    dims.split('x').map(|d| d.parse().unwrap()).collect()
}

/// `spec` for each shape of `shapes` (the first parameter, `x`, sets the naive shape).
fn each(
    src: &'static str,
    shapes: &[&str],
    dtypes: &'static str,
    fill: Fill,
    tol: f64,
    naive: impl Fn(&[Vec<f64>], &[usize]) -> Vec<f64> + Clone + Send + Sync + 'static,
) -> Vec<Spec> {
    shapes
        .iter()
        .map(|&sh| {
            let shape = x_shape(sh);
            let f = naive.clone();
            let boxed: Naive = Box::new(move |v: &[Vec<f64>]| f(v, &shape));
            (src, sh.to_string(), dtypes, fill, tol, boxed)
        })
        .collect()
}

const SOFTMAX: &str = "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
                       y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]]";

fn pool_specs() -> Vec<(&'static str, Spec)> {
    let mut v: Vec<(&'static str, Spec)> = Vec::new();
    // (name, kernel, kh, kw, sh, sw, ph, pw, nhwc, reducer, fill, shapes as (n, c, h, w))
    type P = (
        &'static str,
        &'static str,
        [usize; 6],
        bool,
        Red,
        Fill,
        &'static [(usize, usize, usize, usize)],
    );
    let pools: [P; 9] = [
        (
            "max_pool_nhwc_3x3_s2_p1",
            "let r = 0..3; let s = 0..3; y[[n, p, q, c]] = max(x[[n, 2 * p + r - 1, 2 * q + s - 1, c]])",
            [3, 3, 2, 2, 1, 1],
            true,
            Red::Max,
            Fill::Uniform(-5.0, -1.0),
            &[(2, 3, 7, 9), (1, 16, 8, 8), (1, 1, 1, 1)],
        ),
        (
            "max_pool_2x2_s2",
            "let r = 0..2; let s = 0..2; y[[n, c, p, q]] = max(x[[n, c, 2 * p + r, 2 * q + s]])",
            [2, 2, 2, 2, 0, 0],
            false,
            Red::Max,
            Fill::Uniform(-3.0, 3.0),
            &[(2, 3, 8, 6), (1, 2, 7, 9)],
        ),
        (
            "max_pool_same_3x3_s1",
            "let r = 0..3; let s = 0..3; y[[n, c, p, q]] = max(x[[n, c, p + r - 1, q + s - 1]])",
            [3, 3, 1, 1, 1, 1],
            false,
            Red::Max,
            Fill::Uniform(-5.0, -1.0),
            &[(2, 3, 7, 5), (1, 2, 16, 33)],
        ),
        (
            "max_pool_2x3_strides_2_3",
            "let kh = 0..2; let kw = 0..3; y[[n, c, p, q]] = max(x[[n, c, 2 * p + kh, 3 * q + kw]])",
            [2, 3, 2, 3, 0, 0],
            false,
            Red::Max,
            Fill::Uniform(-3.0, 3.0),
            &[(1, 2, 9, 13)],
        ),
        (
            "max_pool_2d",
            "let r = 0..3; let s = 0..3; y[[p, q]] = max(x[[2 * p + r - 1, 2 * q + s - 1]])",
            [3, 3, 2, 2, 1, 1],
            false,
            Red::Max,
            Fill::Uniform(-5.0, -1.0),
            &[(1, 1, 7, 5), (1, 1, 1, 1), (1, 1, 33, 65)],
        ),
        (
            "max_pool_1d",
            "let r = 0..3; y[[q]] = max(x[[2 * q + r - 1]])",
            [1, 3, 1, 2, 0, 1],
            false,
            Red::Max,
            Fill::Uniform(-5.0, -1.0),
            &[(1, 1, 1, 9), (1, 1, 1, 64)],
        ),
        (
            "min_pool_nhwc_same",
            "let r = 0..3; let s = 0..3; y[[n, p, q, c]] = min(x[[n, p + r - 1, q + s - 1, c]])",
            [3, 3, 1, 1, 1, 1],
            true,
            Red::Min,
            Fill::Uniform(1.0, 5.0),
            &[(2, 4, 5, 6)],
        ),
        (
            "mean_pool_3x3_s2_p1",
            "let r = 0..3; let s = 0..3; y[[n, c, p, q]] = mean(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]])",
            [3, 3, 2, 2, 1, 1],
            false,
            Red::Mean,
            Fill::Uniform(1.0, 5.0),
            &[(2, 3, 7, 5), (1, 1, 16, 16)],
        ),
        (
            // Padding 2 with 2x2 windows: the first and last windows lie wholly outside
            // (−∞, the identity).
            "max_pool_window_in_padding",
            "let r = 0..2; let s = 0..2; y[[p, q]] = max(x[[2 * p + r - 2, 2 * q + s - 2]])",
            [2, 2, 2, 2, 2, 2],
            false,
            Red::Max,
            Fill::Uniform(-3.0, 3.0),
            &[(1, 1, 4, 4), (1, 1, 5, 7)],
        ),
    ];
    for (name, src, [kh, kw, sh, sw, ph, pw], nhwc, red, fill, images) in pools {
        for &(n, c, h, w) in images {
            let pool = Pool {
                n,
                c,
                h,
                w,
                kh,
                kw,
                sh,
                sw,
                ph,
                pw,
                nhwc,
            };
            let (po, qo) = pool.out();
            let (xs, ys) = match (name, nhwc) {
                ("max_pool_2d" | "max_pool_window_in_padding", _) => {
                    (format!("{h}x{w}"), format!("{po}x{qo}"))
                }
                ("max_pool_1d", _) => (format!("{w}"), format!("{qo}")),
                (_, true) => (format!("{n}x{h}x{w}x{c}"), format!("{n}x{po}x{qo}x{c}")),
                (_, false) => (format!("{n}x{c}x{h}x{w}"), format!("{n}x{c}x{po}x{qo}")),
            };
            let naive: Naive = Box::new(move |v: &[Vec<f64>]| pool.run(&v[0], red));
            v.push((name, (src, format!("x={xs} y={ys}"), "", fill, 2e-5, naive)));
        }
    }
    let pool = Pool {
        n: 1,
        c: 2,
        h: 9,
        w: 9,
        kh: 3,
        kw: 3,
        sh: 2,
        sw: 2,
        ph: 1,
        pw: 1,
        nhwc: false,
    };
    v.push((
        "max_pool_bf16_in_f16_out",
        (
            "let r = 0..3; let s = 0..3; y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]])",
            "x=1x2x9x9 y=1x2x5x5".into(),
            "x=bf16,y=f16",
            Fill::Uniform(-5.0, -1.0),
            2e-5,
            Box::new(move |v: &[Vec<f64>]| pool.run(&v[0], Red::Max)),
        ),
    ));
    v
}

fn specs() -> Vec<(&'static str, Spec)> {
    let mut v = pool_specs();
    let mut add = |name: &'static str, specs: Vec<Spec>| {
        v.extend(specs.into_iter().map(|s| (name, s)));
    };
    let u = Fill::Uniform(-3.0, 3.0);
    let last = |s: &[usize]| vec![s.len() - 1];
    // Softmax.
    add(
        "softmax_3d",
        each(
            "m[[b, i]] = max(x[[b, i, j]]); s[[b, i]] = sum(exp(x[[b, i, j]] - m[[b, i]])); \
             y[[b, i, j]] = exp(x[[b, i, j]] - m[[b, i]]) / s[[b, i]]",
            &["x=2x3x17 y=2x3x17", "x=3x2x64 y=3x2x64", "x=1x1x1 y=1x1x1"],
            "",
            u,
            2e-5,
            move |v, s| softmax(&v[0], s, &last(s)),
        ),
    );
    add(
        "softmax_4d",
        each(
            "m[[b, h, i]] = max(x[[b, h, i, j]]); s[[b, h, i]] = sum(exp(x[[b, h, i, j]] - m[[b, h, i]])); \
             y[[b, h, i, j]] = exp(x[[b, h, i, j]] - m[[b, h, i]]) / s[[b, h, i]]",
            &["x=2x3x5x7 y=2x3x5x7"],
            "",
            u,
            2e-5,
            move |v, s| softmax(&v[0], s, &last(s)),
        ),
    );
    add(
        "softmax_first_axis",
        each(
            "m[[j]] = max(x[[i, j]]); s[[j]] = sum(exp(x[[i, j]] - m[[j]])); \
             y[[i, j]] = exp(x[[i, j]] - m[[j]]) / s[[j]]",
            &[
                "x=5x7 y=5x7",
                "x=33x1 y=33x1",
                "x=1x3 y=1x3",
                "x=100x40 y=100x40",
            ],
            "",
            u,
            2e-5,
            |v, s| softmax(&v[0], s, &[0]),
        ),
    );
    add(
        "softmax_middle_axis",
        each(
            "m[[b, j]] = max(x[[b, i, j]]); s[[b, j]] = sum(exp(x[[b, i, j]] - m[[b, j]])); \
             y[[b, i, j]] = exp(x[[b, i, j]] - m[[b, j]]) / s[[b, j]]",
            &["x=2x5x3 y=2x5x3", "x=2x40x33 y=2x40x33"],
            "",
            u,
            2e-5,
            |v, s| softmax(&v[0], s, &[1]),
        ),
    );
    add(
        "softmax_temperature",
        each(
            "m[[i]] = max(x[[i, j]] / t[[]]); s[[i]] = sum(exp(x[[i, j]] / t[[]] - m[[i]])); \
             y[[i, j]] = exp(x[[i, j]] / t[[]] - m[[i]]) / s[[i]]",
            &["x=5x33 t= y=5x33", "x=3x1000 t= y=3x1000"],
            "",
            u,
            2e-5,
            |v, s| {
                let scaled: Vec<f64> = v[0].iter().map(|x| x / v[1][0]).collect();
                softmax(&scaled, s, &[1])
            },
        ),
    );
    add(
        "log_softmax",
        each(
            "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
             y[[i, j]] = x[[i, j]] - m[[i]] - log(s[[i]])",
            &["x=5x33 y=5x33", "x=1x1 y=1x1", "x=2x4097 y=2x4097"],
            "",
            u,
            2e-5,
            |v, s| log_softmax(&v[0], s),
        ),
    );
    add(
        "softmax_large_inputs",
        each(
            SOFTMAX,
            &[
                "x=3x16 y=3x16",
                "x=2x32 y=2x32",
                "x=2x64 y=2x64",
                "x=7x13 y=7x13",
                "x=2x4097 y=2x4097",
            ],
            "",
            Fill::Uniform(997.0, 1003.0),
            2e-5,
            |v, s| softmax(&v[0], s, &[1]),
        ),
    );
    add(
        "softmax_minus_infinity",
        each(
            SOFTMAX,
            &["x=4x33 y=4x33", "x=4x16 y=4x16"],
            "",
            Fill::MinusInfinity,
            2e-5,
            |v, s| softmax(&v[0], s, &[1]),
        ),
    );
    add(
        "softmax_f16_in_f32_out",
        each(
            SOFTMAX,
            &["x=5x33 y=5x33", "x=3x1000 y=3x1000"],
            "x=f16",
            u,
            2e-5,
            |v, s| softmax(&v[0], s, &[1]),
        ),
    );
    add(
        "softmax_f32_in_bf16_out",
        each(
            SOFTMAX,
            &["x=5x33 y=5x33", "x=1x1 y=1x1"],
            "y=bf16",
            u,
            2e-5,
            |v, s| softmax(&v[0], s, &[1]),
        ),
    );
    add(
        "softmax_division_in_epilogue",
        each(
            "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
             y[[i, j]] = exp(x[[i, j]] - m[[i]]); y[[i, j]] = y[[i, j]] / s[[i]]",
            &["x=5x33 y=5x33", "x=3x16 y=3x16", "x=2x4097 y=2x4097"],
            "",
            u,
            2e-5,
            |v, s| softmax(&v[0], s, &[1]),
        ),
    );
    add(
        "softmax_with_an_elementwise_intermediate",
        each(
            "m[[i]] = max(x[[i, j]]); e[[i, j]] = exp(x[[i, j]] - m[[i]]); \
             s[[i]] = sum(e[[i, j]]); y[[i, j]] = e[[i, j]] / s[[i]]",
            &["x=5x33 y=5x33", "x=1x1 y=1x1", "x=2x4097 y=2x4097"],
            "",
            u,
            2e-5,
            |v, s| softmax(&v[0], s, &[1]),
        ),
    );
    add(
        "softmax_transposed_output",
        each(
            "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
             y[[j, i]] = exp(x[[i, j]] - m[[i]]) / s[[i]]",
            &["x=5x33 y=33x5", "x=3x40 y=40x3"],
            "",
            u,
            2e-5,
            |v, s| {
                let y = softmax(&v[0], s, &[1]);
                let (r, c) = (s[0], s[1]);
                (0..r * c).map(|f| y[(f % r) * c + f / r]).collect()
            },
        ),
    );
    add(
        "logsumexp",
        each(
            "m[[i]] = max(x[[i, j]]); y[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
             y[[i]] = m[[i]] + log(y[[i]])",
            &["x=5x33 y=5", "x=1x1 y=1", "x=2x4097 y=2"],
            "",
            u,
            2e-5,
            |v, s| {
                let m = reduce(&v[0], s, &[1], Red::Max);
                let e: Vec<f64> = (0..v[0].len())
                    .map(|f| (v[0][f] - m[f / s[1]]).exp())
                    .collect();
                let sum = reduce(&e, s, &[1], Red::Sum);
                m.iter().zip(&sum).map(|(m, s)| m + s.ln()).collect()
            },
        ),
    );
    // Layer norm, RMS norm and relatives.
    add(
        "layer_norm_plain",
        each(
            "mu[[i]] = mean(x[[i, j]]); var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]])); \
             y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 0.00001)",
            &["x=5x33 y=5x33", "x=1x1 y=1x1", "x=4x32 y=4x32", "x=3x4097 y=3x4097"],
            "",
            u,
            2e-5,
            |v, s| normalize(&v[0], s, &[1], 1e-5),
        ),
    );
    add(
        "layer_norm_scale_only",
        each(
            "mu[[i]] = mean(x[[i, j]]); var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]])); \
             y[[i, j]] = (x[[i, j]] - mu[[i]]) / sqrt(var[[i]] + 0.00001) * g[[j]]",
            &["x=5x33 g=33 y=5x33", "x=1x7 g=7 y=1x7"],
            "",
            u,
            2e-5,
            |v, s| {
                let z = normalize(&v[0], s, &[1], 1e-5);
                (0..z.len()).map(|f| z[f] * v[1][f % s[1]]).collect()
            },
        ),
    );
    let ln_affine = |v: &[Vec<f64>], s: &[usize]| {
        let d = s[s.len() - 1];
        let z = normalize(&v[0], s, &[s.len() - 1], 1e-5);
        (0..z.len())
            .map(|f| z[f] * v[1][f % d] + v[2][f % d])
            .collect::<Vec<f64>>()
    };
    add(
        "layer_norm_f16",
        each(
            "mu[[i]] = mean(x[[i, j]]); var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]])); \
             y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 1e-5) * g[[j]] + b[[j]]",
            &["x=5x33 g=33 b=33 y=5x33", "x=2x768 g=768 b=768 y=2x768"],
            "x=f16,g=f16,b=f16,y=f16",
            u,
            2e-5,
            ln_affine,
        ),
    );
    add(
        "layer_norm_3d",
        each(
            "mu[[b, t]] = mean(x[[b, t, d]]); \
             var[[b, t]] = mean((x[[b, t, d]] - mu[[b, t]]) * (x[[b, t, d]] - mu[[b, t]])); \
             y[[b, t, d]] = (x[[b, t, d]] - mu[[b, t]]) * rsqrt(var[[b, t]] + 1e-5) * g[[d]] + be[[d]]",
            &["x=2x3x17 g=17 be=17 y=2x3x17", "x=1x2x64 g=64 be=64 y=1x2x64"],
            "",
            u,
            2e-5,
            ln_affine,
        ),
    );
    add(
        // E[x²] − E[x]² cancels: a looser tolerance.
        "layer_norm_moments",
        each(
            "mu[[i]] = mean(x[[i, j]]); ms[[i]] = mean(x[[i, j]] * x[[i, j]]); \
             var[[i]] = ms[[i]] - mu[[i]] * mu[[i]]; \
             y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 1e-5)",
            &["x=5x33 y=5x33", "x=2x300 y=2x300"],
            "",
            u,
            1e-3,
            |v, s| normalize(&v[0], s, &[1], 1e-5),
        ),
    );
    add(
        "rms_norm_sqrt_one_plus_g",
        each(
            "ms[[i]] = mean(x[[i, j]] * x[[i, j]]); \
             y[[i, j]] = x[[i, j]] / sqrt(ms[[i]] + 1e-6) * (1.0 + g[[j]])",
            &[
                "x=5x33 g=33 y=5x33",
                "x=1x1 g=1 y=1x1",
                "x=2x4097 g=4097 y=2x4097",
            ],
            "",
            u,
            2e-5,
            |v, s| {
                let z = rms(&v[0], s, 1e-6);
                (0..z.len())
                    .map(|f| z[f] * (1.0 + v[1][f % s[1]]))
                    .collect()
            },
        ),
    );
    add(
        "rms_norm_f16",
        each(
            "ms[[i]] = mean(x[[i, j]] * x[[i, j]]); y[[i, j]] = x[[i, j]] * rsqrt(ms[[i]] + 1e-6) * g[[j]]",
            &["x=5x33 g=33 y=5x33", "x=3x4096 g=4096 y=3x4096"],
            "x=f16,g=f16,y=f16",
            u,
            2e-5,
            |v, s| {
                let z = rms(&v[0], s, 1e-6);
                (0..z.len()).map(|f| z[f] * v[1][f % s[1]]).collect()
            },
        ),
    );
    add(
        "batch_norm",
        each(
            "mu[[c]] = mean(x[[n, c, h, w]]); \
             var[[c]] = mean((x[[n, c, h, w]] - mu[[c]]) * (x[[n, c, h, w]] - mu[[c]])); \
             y[[n, c, h, w]] = (x[[n, c, h, w]] - mu[[c]]) * rsqrt(var[[c]] + 1e-5) * g[[c]] + b[[c]]",
            &["x=2x3x5x7 g=3 b=3 y=2x3x5x7", "x=1x1x1x1 g=1 b=1 y=1x1x1x1"],
            "",
            u,
            2e-5,
            |v, s| {
                let z = normalize(&v[0], s, &[0, 2, 3], 1e-5);
                (0..z.len())
                    .map(|f| {
                        let c = f / (s[2] * s[3]) % s[1];
                        z[f] * v[1][c] + v[2][c]
                    })
                    .collect()
            },
        ),
    );
    add(
        "instance_norm",
        each(
            "mu[[n, c]] = mean(x[[n, c, h, w]]); \
             var[[n, c]] = mean((x[[n, c, h, w]] - mu[[n, c]]) * (x[[n, c, h, w]] - mu[[n, c]])); \
             y[[n, c, h, w]] = (x[[n, c, h, w]] - mu[[n, c]]) * rsqrt(var[[n, c]] + 1e-5)",
            &["x=2x3x5x7 y=2x3x5x7"],
            "",
            u,
            2e-5,
            |v, s| normalize(&v[0], s, &[2, 3], 1e-5),
        ),
    );
    // Reductions.
    let rows = &[
        "x=5x33 y=5",
        "x=1x1 y=1",
        "x=3x1 y=3",
        "x=1x64 y=1",
        "x=3x4097 y=3",
    ];
    add(
        "row_max",
        each("y[[i]] = max(x[[i, j]])", rows, "", u, 2e-5, |v, s| {
            reduce(&v[0], s, &[1], Red::Max)
        }),
    );
    add(
        "row_sum",
        each(
            "y[[i]] = sum(x[[i, j]])",
            &["x=5x33 y=5", "x=1x1 y=1", "x=3x4097 y=3"],
            "",
            u,
            1e-4,
            |v, s| reduce(&v[0], s, &[1], Red::Sum),
        ),
    );
    add(
        "row_mean",
        each(
            "y[[i]] = mean(x[[i, j]])",
            &["x=5x33 y=5", "x=3x4097 y=3"],
            "",
            u,
            2e-5,
            |v, s| reduce(&v[0], s, &[1], Red::Mean),
        ),
    );
    add(
        "row_prod",
        each(
            "y[[i]] = prod(x[[i, j]])",
            &["x=5x7 y=5", "x=1x1 y=1", "x=3x16 y=3", "x=2x1000 y=2"],
            "",
            Fill::Uniform(0.99, 1.01),
            1e-4,
            |v, s| reduce(&v[0], s, &[1], Red::Prod),
        ),
    );
    add(
        "column_min",
        each(
            "y[[j]] = min(x[[i, j]])",
            &["x=5x33 y=33", "x=1x1 y=1", "x=100x3 y=3", "x=4097x2 y=2"],
            "",
            u,
            2e-5,
            |v, s| reduce(&v[0], s, &[0], Red::Min),
        ),
    );
    add(
        "min_over_two",
        each(
            "y[[i]] = min(x[[i, j, k]])",
            &["x=3x4x5 y=3", "x=2x64x3 y=2"],
            "",
            u,
            2e-5,
            |v, s| reduce(&v[0], s, &[1, 2], Red::Min),
        ),
    );
    add(
        "min_over_first_and_last",
        each(
            "y[[j]] = min(x[[i, j, k]])",
            &["x=7x4x5 y=4"],
            "",
            u,
            2e-5,
            |v, s| reduce(&v[0], s, &[0, 2], Red::Min),
        ),
    );
    add(
        "mean_over_middle",
        each(
            "y[[b, j]] = mean(x[[b, i, j]])",
            &["x=2x5x7 y=2x7", "x=3x100x3 y=3x3"],
            "",
            u,
            2e-5,
            |v, s| reduce(&v[0], s, &[1], Red::Mean),
        ),
    );
    add(
        "full_max_rank_0",
        each(
            "y[[]] = max(x[[i, j]])",
            &["x=5x33 y=", "x=1x1 y=", "x=64x65 y="],
            "",
            u,
            2e-5,
            |v, s| reduce(&v[0], s, &[0, 1], Red::Max),
        ),
    );
    add(
        "full_sum_rank_0",
        each(
            "y[[]] = sum(x[[i]])",
            &["x=33 y=", "x=4097 y="],
            "",
            u,
            1e-4,
            |v, s| reduce(&v[0], s, &[0], Red::Sum),
        ),
    );
    add(
        "row_min_epilogue",
        each(
            "y[[i]] = min(x[[i, j]]); y[[i]] = y[[i]] * t[[]] + b[[i]]",
            &["x=5x33 t= b=5 y=5", "x=3x1 t= b=3 y=3"],
            "",
            u,
            2e-5,
            |v, s| {
                let m = reduce(&v[0], s, &[1], Red::Min);
                m.iter().zip(&v[2]).map(|(m, b)| m * v[1][0] + b).collect()
            },
        ),
    );
    add(
        "row_min_f16_in_bf16_out",
        each(
            "y[[i]] = min(x[[i, j]])",
            &["x=5x33 y=5"],
            "x=f16,y=bf16",
            u,
            2e-5,
            |v, s| reduce(&v[0], s, &[1], Red::Min),
        ),
    );
    add(
        // A point whose `j + 1` falls outside contributes −∞ (left out).
        "largest_step",
        each(
            "y[[i]] = max(x[[i, j + 1]] - x[[i, j]])",
            &["x=5x33 y=5", "x=3x1 y=3"],
            "",
            u,
            2e-5,
            |v, s| {
                (0..s[0])
                    .map(|i| {
                        (0..s[1].saturating_sub(1))
                            .map(|j| v[0][i * s[1] + j + 1] - v[0][i * s[1] + j])
                            .fold(f64::NEG_INFINITY, f64::max)
                    })
                    .collect()
            },
        ),
    );
    add(
        "standard_deviation",
        each(
            "mu[[i]] = mean(x[[i, j]]); y[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]])); \
             y[[i]] = sqrt(y[[i]])",
            &["x=5x33 y=5", "x=1x1 y=1", "x=2x4097 y=2"],
            "",
            u,
            2e-5,
            |v, s| {
                let mu = reduce(&v[0], s, &[1], Red::Mean);
                let d2: Vec<f64> = (0..v[0].len())
                    .map(|f| (v[0][f] - mu[f / s[1]]).powi(2))
                    .collect();
                reduce(&d2, s, &[1], Red::Mean)
                    .into_iter()
                    .map(f64::sqrt)
                    .collect()
            },
        ),
    );
    v
}

fn fill(how: Fill, n: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..n)
        .map(|k| match how {
            Fill::Uniform(lo, hi) => rng.gen_range(lo..hi),
            Fill::MinusInfinity if k % 3 == 1 => f32::NEG_INFINITY,
            Fill::MinusInfinity => rng.gen_range(-3.0..3.0),
        })
        .collect()
}

fn variants() -> Vec<Variant> {
    let mut rng = StdRng::seed_from_u64(23);
    specs()
        .into_iter()
        .map(|(name, (src, shapes, dtypes, how, tol, naive))| {
            let case = Case::new(name, src, &shapes, dtypes);
            let extents = case.extents();
            let k = &case.kernel;
            let data: Vec<Buffer> = case
                .shapes
                .iter()
                .enumerate()
                .map(|(p, s)| {
                    let values = if p == k.output {
                        Vec::new()
                    } else if s.is_empty() {
                        vec![0.7]
                    } else {
                        fill(how, s.iter().product(), &mut rng)
                    };
                    Buffer::from_f32(k.params[p].dtype, &values)
                })
                .collect();
            // The naive loops read the values as stored (half-precision inputs rounded).
            let values: Vec<Vec<f64>> = data
                .iter()
                .map(|b| b.to_f32().into_iter().map(f64::from).collect())
                .collect();
            let want = naive(&values);
            assert_eq!(
                want.len(),
                case.shapes[k.output].iter().product::<usize>(),
                "{name} {shapes}: the naive output's size"
            );
            Variant {
                name: format!("{name} {shapes}"),
                case,
                extents,
                data,
                want,
                tol,
            }
        })
        .collect()
}

/// `Err` naming the first element of `got` not within the tolerance of `want` (NaN where
/// NaN is expected, equal infinities).
fn compare(got: &[f32], v: &Variant) -> Result<(), String> {
    let k = &v.case.kernel;
    let tol = match k.params[k.output].dtype {
        DType::F32 => v.tol,
        d => v.tol + f64::from(tensor_dsl::measure::tolerance(d)) + 1e-4,
    };
    if got.len() != v.want.len() {
        return Err(format!("{} elements, expected {}", got.len(), v.want.len()));
    }
    for (e, (&g, &w)) in got.iter().zip(&v.want).enumerate() {
        let g = f64::from(g);
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        if !ok {
            return Err(format!("element {e}: got {g}, naive {w}"));
        }
    }
    Ok(())
}

/// Runs `f` on every variant, `workers` at a time; panics with every failure.
fn on_all(variants: &[Variant], f: &(dyn Fn(usize, &Variant) -> Vec<String> + Sync)) {
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for w in 0..workers {
            let failures = &failures;
            scope.spawn(move || {
                for (n, v) in variants
                    .iter()
                    .enumerate()
                    .filter(|(n, _)| n % workers == w)
                {
                    let found = f(n, v);
                    failures.lock().unwrap().extend(found);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn call(v: &Variant, opts: &Options) -> Result<Vec<f32>, String> {
    let k = &v.case.kernel;
    let shapes = v.case.shape_refs();
    let inputs: Vec<TensorRef<'_>> = k
        .inputs()
        .iter()
        .map(|&q| TensorRef::new(shapes[q], v.data[q].view()))
        .collect();
    let mut out = Buffer::zeros(k.params[k.output].dtype, v.want.len());
    tensor_dsl::dispatch::call(
        k,
        &inputs,
        TensorMut {
            shape: shapes[k.output],
            data: out.view_mut(),
        },
        opts,
    )
    .map_err(|e| e.to_string())?;
    Ok(out.to_f32())
}

/// One more point of the row template's CPU space than the default: the scalar serial rows
/// for every third variant, else a seeded random point.
fn other_cpu_config(n: usize, plan: &RowPlan<'_>) -> RowsCpuConfig {
    if n.is_multiple_of(3) {
        return RowsCpuConfig {
            parallel: false,
            vector: 1,
            ..RowsCpuConfig::default()
        };
    }
    let mut all = RowsCpuConfig::all_for(plan);
    all.shuffle(&mut StdRng::seed_from_u64(n as u64));
    all[0]
}

#[test]
fn cpu_and_reference_match_naive() {
    let variants = variants();
    let have_cc = tensor_dsl::runtime::cpu::compiler().is_ok();
    if !have_cc {
        println!("no C compiler: the CPU device runs the reference interpreter");
    }
    on_all(&variants, &|n, v| {
        let mut failures = Vec::new();
        for dev in [Device::Cpu, Device::Reference] {
            if let Err(e) = call(v, &Options::new().device(dev)).and_then(|got| compare(&got, v)) {
                failures.push(format!("{} on {dev:?}: {e}", v.name));
            }
        }
        if have_cc {
            let k = &v.case.kernel;
            let plan = RowPlan::new(k, &v.extents).unwrap();
            let config = other_cpu_config(n, &plan);
            let refs: Vec<tensor_dsl::Data<'_>> = v.data.iter().map(Buffer::view).collect();
            let mut out = Buffer::zeros(k.params[k.output].dtype, v.want.len());
            let r = tensor_dsl::runtime::rows::run_cpu_with(
                k,
                &v.extents,
                &v.case.shape_refs(),
                &refs,
                out.view_mut(),
                &config,
            )
            .map_err(|e| format!("{e:?}"))
            .and_then(|()| compare(&out.to_f32(), v));
            if let Err(e) = r {
                failures.push(format!("{} {config:?}: {e}", v.name));
            }
        }
        failures
    });
}

/// The GPU configurations emulated and compiled: the default, two seeded random points of
/// the space GPU tuning searches (through `GpuTemplate`), and 64 threads per row in blocks
/// of two rows (shuffles and the shared-memory step).
fn gpu_configs(v: &Variant, n: usize) -> Vec<RowsGpuConfig> {
    use tensor_dsl::template::gpu::{GpuTarget, GpuTemplate};
    let k = &v.case.kernel;
    let plan = RowPlan::new(k, &v.extents).unwrap();
    let mut configs = vec![RowsGpuConfig::heuristic(&plan)];
    let template = GpuTemplate::new(k, &v.extents, &GpuTarget::h100()).unwrap();
    let mut rng = StdRng::seed_from_u64(1000 + n as u64);
    let fixed = RowsGpuConfig {
        threads_per_row: 64,
        rows_per_block: 2,
    };
    let random = (0..2).map(|_| {
        let point = template.space().sample_uniform(&mut rng).unwrap();
        template.decode(&point).unwrap().rows.unwrap()
    });
    for c in random.chain([fixed]) {
        if !configs.contains(&c) {
            configs.push(c);
        }
    }
    configs
}

#[test]
fn emulated_cuda_matches_naive() {
    let Some(cxx) = common::gxx() else {
        println!("skipped: g++ not found (install the `g++` package, or set CXX)");
        return;
    };
    let dir = common::emulator_dir("rows-variants");
    let variants = variants();
    // Eight variants to a program: one compiler start for all of them.
    let batches: Vec<Vec<usize>> = (0..variants.len())
        .collect::<Vec<_>>()
        .chunks(8)
        .map(<[usize]>::to_vec)
        .collect();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for w in 0..workers {
            let (cxx, dir, variants, batches, failures) =
                (&cxx, &dir, &variants, &batches, &failures);
            scope.spawn(move || {
                for (b, batch) in batches.iter().enumerate().filter(|(b, _)| b % workers == w) {
                    let configs: Vec<Vec<RowsGpuConfig>> = batch
                        .iter()
                        .map(|&n| gpu_configs(&variants[n], n))
                        .collect();
                    let jobs: Vec<common::EmulatedJob<'_>> = batch
                        .iter()
                        .zip(&configs)
                        .map(|(&n, c)| {
                            let v = &variants[n];
                            (
                                &v.case,
                                v.extents.as_slice(),
                                v.data.as_slice(),
                                c.as_slice(),
                            )
                        })
                        .collect();
                    let tag = format!("batch{b}");
                    let found: Vec<String> = match common::emulate_rows_many(cxx, dir, &tag, &jobs)
                    {
                        Err(e) => vec![e],
                        Ok(outputs) => batch
                            .iter()
                            .zip(&configs)
                            .zip(outputs)
                            .flat_map(|((&n, configs), outputs)| {
                                let (v, tag) = (&variants[n], &tag);
                                configs.iter().zip(outputs).filter_map(move |(c, got)| {
                                    compare(&got, v).err().map(|e| {
                                        format!("{} {c:?} ({tag}.cpp): emulated CUDA {e}", v.name)
                                    })
                                })
                            })
                            .collect(),
                    };
                    failures.lock().unwrap().extend(found);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cuda_compiles_with_nvrtc_and_ptxas() {
    if !common::tools_present(common::nvrtc_unavailable()) {
        return;
    }
    #[cfg(feature = "cuda")]
    on_all(&variants(), &|n, v| {
        let mut failures = Vec::new();
        // The default and one random point (the emulator runs more).
        for config in gpu_configs(v, n).into_iter().take(2) {
            let gen = tensor_dsl::codegen::rows::generate_cuda(
                &v.case.kernel,
                &v.extents,
                &v.case.shape_refs(),
                &config,
            );
            let r = gen.and_then(|g| {
                let ptx =
                    tensor_dsl::runtime::nvrtc::compile_ptx("variant", &g.source, "compute_90")
                        .map_err(|e| format!("NVRTC: {e}"))?;
                tensor_dsl::runtime::ptxas::assemble(&ptx, "sm_90")
                    .map_err(|e| format!("ptxas: {e}"))
            });
            if let Err(e) = r {
                failures.push(format!("{} {config:?}: {e}", v.name));
            }
        }
        failures
    });
}

/// GCC 12.2 at `-O3 -march=native` (and plain `-mavx2`) vectorized the scalar serial rows of
/// this kernel on its own and took a different maximum in each vector lane (3x4: two of 12
/// elements wrong); the scalar configuration now turns GCC's vectorizer off.
#[test]
fn scalar_rows_are_not_miscompiled() {
    if tensor_dsl::runtime::cpu::compiler().is_err() {
        println!("skipped: no C compiler");
        return;
    }
    let scalar = RowsCpuConfig {
        parallel: false,
        vector: 1,
        ..RowsCpuConfig::default()
    };
    for (r, c) in [(3, 4), (4, 3), (5, 8), (8, 16)] {
        let case = Case::new(
            "next_row_max",
            "m[[i]] = max(x[[i + 1, j]]); y[[i, j]] = x[[i, j]] - m[[i]]",
            &format!("x={r}x{c} y={r}x{c}"),
            "",
        );
        let x: Vec<f32> = (0..r * c).map(|v| ((v * 37) % 17) as f32 - 8.0).collect();
        let mut want = vec![0.0f32; r * c];
        for i in 0..r {
            let m = if i + 1 < r {
                x[(i + 1) * c..(i + 2) * c]
                    .iter()
                    .copied()
                    .fold(f32::NEG_INFINITY, f32::max)
            } else {
                f32::NEG_INFINITY
            };
            for j in 0..c {
                want[i * c + j] = x[i * c + j] - m;
            }
        }
        let src = tensor_dsl::codegen::rows::generate_c(
            &case.kernel,
            &case.extents(),
            &case.shape_refs(),
            &scalar,
        )
        .unwrap();
        assert!(src.contains("no-tree-vectorize"), "{src}");
        let mut got = vec![0.0f32; r * c];
        tensor_dsl::runtime::rows::run_cpu_with(
            &case.kernel,
            &case.extents(),
            &case.shape_refs(),
            &[(&x).into(), Default::default()],
            (&mut got).into(),
            &scalar,
        )
        .map_err(|e| format!("{e:?}"))
        .unwrap();
        assert_eq!(got, want, "{r}x{c}");
    }
}

/// CPU tuning checks every measured point against the reference: outputs that are −∞ by
/// definition (pooling windows wholly in the padding, a largest step of a one-column row)
/// match, so every point is valid and tuning finds a best one (it used to reject them all:
/// `−∞ − −∞` is NaN).
#[test]
fn tuning_accepts_infinite_outputs() {
    if tensor_dsl::runtime::cpu::compiler().is_err() {
        println!("skipped: no C compiler");
        return;
    }
    for (src, shapes) in [
        (
            "let r = 0..2; let s = 0..2; y[[p, q]] = max(x[[2 * p + r - 2, 2 * q + s - 2]])",
            vec![vec![10, 10], vec![6, 6]],
        ),
        (
            "y[[i]] = max(x[[i, j + 1]] - x[[i, j]])",
            vec![vec![40, 1], vec![40]],
        ),
    ] {
        let k = tensor_dsl::ir::parse_text("inf", src, None).unwrap();
        let opts = tensor_dsl::autotune::TuneOptions {
            trials: 3,
            batch: 3,
            strategy: "random".into(),
            ..Default::default()
        };
        let out = tensor_dsl::autotune::tune_cpu(&k, &shapes, &opts, &mut |_| {}).unwrap();
        let errors: Vec<_> = out.records.iter().filter_map(|r| r.error.clone()).collect();
        assert!(errors.is_empty(), "{src}: {errors:?}");
        assert!(out.best.is_some(), "{src}");
    }
}

/// What the documented language leaves out is a clear error, never a panic: a window range
/// that does not start at 0, a reduction inside an expression and a two-argument `max` over
/// an index not on the left are parse errors that say what to write. (A softmax whose `exp`
/// is an intermediate over `[i, j]` once ran only on the reference interpreter: the parser
/// now writes such an intermediate into its readers, and the CUDA code generates.)
#[test]
fn documented_limits_are_clear_errors() {
    let k = tensor_dsl::ir::parse_text(
        "softmax_e",
        "e[[i, j]] = exp(x[[i, j]]); s[[i]] = sum(e[[i, j]]); y[[i, j]] = e[[i, j]] / s[[i]]",
        None,
    )
    .unwrap();
    let x: Vec<f32> = (0..15).map(|v| v as f32 / 7.0 - 1.0).collect();
    let shape = [3usize, 5];
    let mut y = vec![0.0f32; 15];
    tensor_dsl::dispatch::call(
        &k,
        &[TensorRef::new(&shape, (&x).into())],
        TensorMut {
            shape: &shape,
            data: (&mut y).into(),
        },
        &Options::new().device(Device::Cpu),
    )
    .unwrap();
    let xv: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    for (g, w) in y.iter().zip(softmax(&xv, &shape, &[1])) {
        assert!((f64::from(*g) - w).abs() <= 1e-6, "{g} vs {w}");
    }
    let shapes: [&[usize]; 2] = [&shape, &shape];
    let cuda = tensor_dsl::codegen::rows::generate_cuda(
        &k,
        &[3, 5],
        &shapes,
        &RowsGpuConfig {
            threads_per_row: 32,
            rows_per_block: 1,
        },
    )
    .unwrap();
    assert!(cuda.source.contains("__global__"), "{}", cuda.source);
    for (src, says) in [
        (
            "let r = -1..2; y[[p]] = max(x[[p + r]])",
            "an index range starts at 0",
        ),
        (
            "y[[i]] = 2.0 * min(x[[i, j]])",
            "must be the whole right side",
        ),
        (
            "y[[i]] = max(x[[i, j]], 0.0)",
            "`max(a, b)` of two arguments is elementwise",
        ),
    ] {
        let e = tensor_dsl::ir::parse_text("k", src, None).unwrap_err();
        assert!(e.contains(says), "{src}: {e}");
    }
}

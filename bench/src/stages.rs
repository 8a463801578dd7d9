//! The `stages` suite: kernels of several stages (softmax, layer norm, RMS norm, max
//! pooling) and a row minimum in the language, a naive single-threaded Rust baseline, and
//! ONNX Runtime on the CPU as the library a user would pick instead.
//!
//! ONNX Runtime ([`crate::ort`]) runs the graphs `Softmax` (axis −1),
//! `LayerNormalization`, `SimplifiedLayerNormalization` (its fused RMS norm, which its
//! optimizer also makes of the ONNX `RMSNormalization` pattern), `MaxPool` and `ReduceMin`
//! (axis −1).

use serde_json::{json, Map, Value};

/// The naive baseline's name.
pub const NAIVE: &str = "naive Rust (one thread)";

/// Layer norm's epsilon.
pub const EPSILON: f64 = 1e-5;

/// A kernel of several stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Softmax over the last axis of a `rows × cols` matrix.
    Softmax { rows: usize, cols: usize },
    /// Layer norm over the last axis of a `rows × cols` matrix, with scale and bias.
    LayerNorm { rows: usize, cols: usize },
    /// RMS norm over the last axis of a `rows × cols` matrix, with a scale.
    RmsNorm { rows: usize, cols: usize },
    /// The minimum of each row of a `rows × cols` matrix.
    RowMin { rows: usize, cols: usize },
    /// Max pooling of an NCHW image with a square window, stride and padding.
    MaxPool {
        n: usize,
        c: usize,
        h: usize,
        w: usize,
        k: usize,
        stride: usize,
        pad: usize,
    },
}

impl Stage {
    /// Reads a workload entry with `"op"`: `softmax`, `layer_norm`, `rms_norm` and `row_min`
    /// take `rows`, `cols`;
    /// `max_pool` takes `N, C, H, W, K, stride` and optional `pad`.
    pub fn parse(
        obj: &Map<String, Value>,
        f: &dyn Fn(&str) -> Result<usize, String>,
    ) -> Result<Stage, String> {
        match obj.get("op").and_then(Value::as_str) {
            Some("softmax") => Ok(Stage::Softmax {
                rows: f("rows")?,
                cols: f("cols")?,
            }),
            Some("layer_norm") => Ok(Stage::LayerNorm {
                rows: f("rows")?,
                cols: f("cols")?,
            }),
            Some("rms_norm") => Ok(Stage::RmsNorm {
                rows: f("rows")?,
                cols: f("cols")?,
            }),
            Some("row_min") => Ok(Stage::RowMin {
                rows: f("rows")?,
                cols: f("cols")?,
            }),
            Some("max_pool") => {
                let p = Stage::MaxPool {
                    n: f("N")?,
                    c: f("C")?,
                    h: f("H")?,
                    w: f("W")?,
                    k: f("K")?,
                    stride: f("stride")?,
                    pad: obj.get("pad").and_then(Value::as_u64).unwrap_or(0) as usize,
                };
                let Stage::MaxPool { h, w, k, pad, .. } = p else {
                    unreachable!()
                };
                if h + 2 * pad < k || w + 2 * pad < k || pad >= k {
                    return Err("max_pool: the window must fit the padded image and see it".into());
                }
                Ok(p)
            }
            other => Err(format!(
                "unknown op {other:?}: expected softmax, layer_norm, rms_norm, row_min or max_pool"
            )),
        }
    }

    /// The pooled image's height and width (0 × 0 for a stage that does not pool).
    pub fn pooled(&self) -> (usize, usize) {
        match *self {
            Stage::MaxPool {
                h,
                w,
                k,
                stride,
                pad,
                ..
            } => (
                (h + 2 * pad - k) / stride + 1,
                (w + 2 * pad - k) / stride + 1,
            ),
            _ => (0, 0),
        }
    }

    /// The kernel in the language and its tensors `(name, shape, is_output)`.
    pub fn kernel_text(&self) -> (String, Vec<(String, Vec<usize>, bool)>) {
        match *self {
            Stage::Softmax { rows, cols } => (
                "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
                 y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]]"
                    .into(),
                vec![
                    ("x".into(), vec![rows, cols], false),
                    ("y".into(), vec![rows, cols], true),
                ],
            ),
            Stage::LayerNorm { rows, cols } => (
                format!(
                    "mu[[i]] = mean(x[[i, j]]); \
                     var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]])); \
                     y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + {EPSILON:e}) * gamma[[j]] + beta[[j]]"
                ),
                vec![
                    ("x".into(), vec![rows, cols], false),
                    ("gamma".into(), vec![cols], false),
                    ("beta".into(), vec![cols], false),
                    ("y".into(), vec![rows, cols], true),
                ],
            ),
            Stage::RmsNorm { rows, cols } => (
                format!(
                    "ms[[i]] = mean(x[[i, j]] * x[[i, j]]); \
                     y[[i, j]] = x[[i, j]] * rsqrt(ms[[i]] + {EPSILON:e}) * gamma[[j]]"
                ),
                vec![
                    ("x".into(), vec![rows, cols], false),
                    ("gamma".into(), vec![cols], false),
                    ("y".into(), vec![rows, cols], true),
                ],
            ),
            Stage::RowMin { rows, cols } => (
                "y[[i]] = min(x[[i, j]])".into(),
                vec![
                    ("x".into(), vec![rows, cols], false),
                    ("y".into(), vec![rows], true),
                ],
            ),
            Stage::MaxPool {
                n,
                c,
                h,
                w,
                k,
                stride,
                pad,
            } => {
                let (p, q) = self.pooled();
                let at = |o: &str, r: &str| {
                    let mut s = if stride == 1 {
                        format!("{o} + {r}")
                    } else {
                        format!("{stride} * {o} + {r}")
                    };
                    if pad > 0 {
                        s.push_str(&format!(" - {pad}"));
                    }
                    s
                };
                (
                    format!(
                        "let r = 0..{k}; let s = 0..{k}; y[[n, c, p, q]] = max(x[[n, c, {}, {}]])",
                        at("p", "r"),
                        at("q", "s")
                    ),
                    vec![
                        ("x".into(), vec![n, c, h, w], false),
                        ("y".into(), vec![n, c, p, q], true),
                    ],
                )
            }
        }
    }

    /// The ONNX operator the helper builds, with its attributes.
    /// The ONNX Runtime helper's description of the graph (`bench/ort/ort_helper.py`).
    pub fn onnx(&self) -> Value {
        match *self {
            Stage::Softmax { .. } => json!({"op": "softmax"}),
            Stage::LayerNorm { .. } => json!({"op": "layer_norm", "epsilon": EPSILON}),
            Stage::RmsNorm { .. } => json!({"op": "rms_norm", "epsilon": EPSILON}),
            Stage::RowMin { .. } => json!({"op": "row_min"}),
            Stage::MaxPool { k, stride, pad, .. } => {
                json!({"op": "max_pool", "kernel": k, "stride": stride, "pad": pad})
            }
        }
    }
}

/// The naive baseline: the textbook loops, one thread, `f32` throughout.
pub fn naive(stage: &Stage, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), String> {
    match (*stage, inputs) {
        (Stage::Softmax { rows, cols }, [x, ..]) => {
            for (xr, yr) in x.chunks(cols).zip(out.chunks_mut(cols)).take(rows) {
                let m = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut s = 0.0f32;
                for (y, &v) in yr.iter_mut().zip(xr) {
                    *y = (v - m).exp();
                    s += *y;
                }
                for y in yr.iter_mut() {
                    *y /= s;
                }
            }
            Ok(())
        }
        (Stage::LayerNorm { rows, cols }, [x, gamma, beta, ..]) => {
            for (xr, yr) in x.chunks(cols).zip(out.chunks_mut(cols)).take(rows) {
                let mu = xr.iter().sum::<f32>() / cols as f32;
                let var = xr.iter().map(|&v| (v - mu) * (v - mu)).sum::<f32>() / cols as f32;
                let inv = 1.0 / (var + EPSILON as f32).sqrt();
                for (j, (y, &v)) in yr.iter_mut().zip(xr).enumerate() {
                    *y = (v - mu) * inv * gamma[j] + beta[j];
                }
            }
            Ok(())
        }
        (Stage::RmsNorm { rows, cols }, [x, gamma, ..]) => {
            for (xr, yr) in x.chunks(cols).zip(out.chunks_mut(cols)).take(rows) {
                let ms = xr.iter().map(|&v| v * v).sum::<f32>() / cols as f32;
                let inv = 1.0 / (ms + EPSILON as f32).sqrt();
                for (j, (y, &v)) in yr.iter_mut().zip(xr).enumerate() {
                    *y = v * inv * gamma[j];
                }
            }
            Ok(())
        }
        (Stage::RowMin { rows, cols }, [x, ..]) => {
            for (xr, y) in x.chunks(cols).zip(out.iter_mut()).take(rows) {
                *y = xr.iter().copied().fold(f32::INFINITY, f32::min);
            }
            Ok(())
        }
        (
            Stage::MaxPool {
                n,
                c,
                h,
                w,
                k,
                stride,
                pad,
            },
            [x, ..],
        ) => {
            let (p, q) = stage.pooled();
            for img in 0..n * c {
                let (src, dst) = (&x[img * h * w..], &mut out[img * p * q..]);
                for op in 0..p {
                    for oq in 0..q {
                        let mut m = f32::NEG_INFINITY;
                        for r in 0..k {
                            for s in 0..k {
                                let (ih, iw) = (op * stride + r, oq * stride + s);
                                if ih >= pad && iw >= pad && ih - pad < h && iw - pad < w {
                                    m = m.max(src[(ih - pad) * w + iw - pad]);
                                }
                            }
                        }
                        dst[op * q + oq] = m;
                    }
                }
            }
            Ok(())
        }
        _ => Err("the naive baseline got the wrong number of inputs".into()),
    }
}

/// The ONNX Runtime column's name (the version is added once the helper answers).
pub fn ort_name(stage: &Stage) -> String {
    let op = match stage {
        Stage::Softmax { .. } => "Softmax",
        Stage::LayerNorm { .. } => "LayerNormalization",
        Stage::RmsNorm { .. } => "SimplifiedLayerNormalization",
        Stage::RowMin { .. } => "ReduceMin",
        Stage::MaxPool { .. } => "MaxPool",
    };
    format!("ONNX Runtime {op} (CPU)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::Baseline;

    fn cases() -> Vec<Stage> {
        vec![
            Stage::Softmax { rows: 3, cols: 17 },
            Stage::LayerNorm { rows: 5, cols: 12 },
            Stage::RmsNorm { rows: 4, cols: 13 },
            Stage::RowMin { rows: 6, cols: 19 },
            Stage::MaxPool {
                n: 2,
                c: 3,
                h: 9,
                w: 11,
                k: 3,
                stride: 2,
                pad: 1,
            },
        ]
    }

    /// The naive baseline and (where installed) ONNX Runtime agree with the reference
    /// interpreter running the kernel in the language.
    #[test]
    fn baselines_match_the_reference() {
        for stage in cases() {
            let (text, tensors) = stage.kernel_text();
            let decl: Vec<(String, bool)> =
                tensors.iter().map(|(n, _, o)| (n.clone(), *o)).collect();
            let kernel = tensor_dsl::ir::parse_text("k", &text, Some(&decl)).unwrap();
            let shapes: Vec<Vec<usize>> = tensors.iter().map(|t| t.1.clone()).collect();
            let data: Vec<Vec<f32>> = tensor_dsl::measure::random_inputs(&kernel, &shapes, 3)
                .iter()
                .map(tensor_dsl::Buffer::to_f32)
                .collect();
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let extents = tensor_dsl::ir::bind(&kernel, &refs).unwrap();
            let views: Vec<tensor_dsl::Data<'_>> = data.iter().map(Into::into).collect();
            let n_out: usize = shapes[kernel.output].iter().product();
            let mut want = vec![0.0f32; n_out];
            tensor_dsl::reference::run(&kernel, &extents, &refs, &views, (&mut want).into());
            let inputs: Vec<&[f32]> = data.iter().map(Vec::as_slice).collect();
            let mut got = vec![f32::NAN; n_out];
            naive(&stage, &inputs, &mut got).unwrap();
            assert!(crate::run::max_rel_err(&got, &want) < 1e-5, "{stage:?}");
            match crate::ort::Ort::for_op(&crate::workloads::Op::Stage(stage), &inputs) {
                Ok(mut ort) => {
                    let mut got = vec![f32::NAN; n_out];
                    ort.run(&inputs, &mut got).unwrap();
                    ort.fetch(&mut got).unwrap();
                    assert!(crate::run::max_rel_err(&got, &want) < 1e-5, "{stage:?}");
                    assert!(ort.time_calls(3).unwrap().unwrap() > 0.0);
                }
                Err(e) => eprintln!("ONNX Runtime skipped: {e}"),
            }
        }
    }
}

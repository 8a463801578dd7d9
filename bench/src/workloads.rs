//! The seed workloads (`bench/workloads.json`) and their kernels in the language.
//!
//! Each workload becomes one kernel statement with concrete shapes:
//! - matmul `M,N,K`: `c[[i, j]] += a[[i, k]] * b[[k, j]]`, a: M×K, b: K×N, c: M×N;
//! - batched matmul with an einsum such as `bkm,bkn->bmn`: `out[[b, m, n]] += lhs[[b, k, m]] *
//!   rhs[[b, k, n]]`, each tensor's axes in the einsum's order;
//! - matmul with a fused epilogue (`"epilogue": "bias_relu"`, the Bolt comparison):
//!   `c[[i, j]] += a[[i, k]] * b[[k, j]]; c[[i, j]] = relu(c[[i, j]] + bias[[j]])`;
//! - convolution (NCHW input, FCRS weights, stride S, zero padding P on each side):
//!   `y[[n, f, p, q]] += x[[n, c, S * p + r - P, S * q + s - P]] * w[[f, c, r, s]]`, with
//!   the output P×Q from the usual formula `(H + 2P - R) / S + 1`.

use serde_json::{json, Map, Value};
pub use tensor_dsl::ir::Problem;
use tensor_dsl::ir::{parse_text, DType};

/// The workloads file, as committed beside this crate.
pub const WORKLOADS_JSON: &str = include_str!("../workloads.json");

/// Suites in the order `--suite all` runs them; suites the file adds later follow, sorted.
pub const SUITE_ORDER: [&str; 6] = [
    "bert_matmul",
    "opevo_matmul",
    "opevo_batch_matmul",
    "opevo_conv2d",
    "resnet50_conv2d",
    "yolo9000_conv2d",
];

/// A hidden suite of tiny kernels for the smoke test (`--suite smoke`).
pub const SMOKE_SUITE: &str = "smoke";

/// What a workload computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Matmul {
        m: usize,
        n: usize,
        k: usize,
    },
    /// A batched matmul; `lhs`, `rhs` and `out` are the einsum's axis letters per tensor,
    /// over the letters `b`, `m`, `n`, `k`.
    BatchMatmul {
        b: usize,
        m: usize,
        n: usize,
        k: usize,
        lhs: String,
        rhs: String,
        out: String,
    },
    Conv2d(Conv),
    /// A matmul whose output gets a bias (one value per column) and a ReLU, in the same
    /// kernel: `c = relu(a · b + bias)` (Bolt's fused-epilogue comparison).
    GemmBiasRelu {
        m: usize,
        n: usize,
        k: usize,
    },
    /// A kernel of several stages (softmax, layer norm, RMS norm, max pooling) or a row
    /// minimum, `"op"` in the file.
    Stage(crate::stages::Stage),
}

/// Row-major element strides of one tensor, by axis letter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strides(Vec<(char, usize)>);

impl Strides {
    /// The tensor with axes `axes` (letters, outermost first) of sizes `size(letter)`.
    pub fn row_major(axes: &str, size: impl Fn(char) -> usize) -> Strides {
        let letters: Vec<char> = axes.chars().collect();
        let mut strides = vec![1usize; letters.len()];
        for d in (0..letters.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * size(letters[d + 1]);
        }
        Strides(letters.into_iter().zip(strides).collect())
    }

    /// The stride of axis `c` (0 if the tensor has no such axis).
    pub fn of(&self, c: char) -> usize {
        self.0.iter().find(|(x, _)| *x == c).map_or(0, |(_, s)| *s)
    }
}

impl Op {
    /// The size of axis `c` (`b`, `m`, `n`, `k`) of a batched matmul; 0 for another op.
    pub fn batch_axis(&self, c: char) -> usize {
        match self {
            Op::BatchMatmul { b, m, n, k, .. } => match c {
                'b' => *b,
                'm' => *m,
                'n' => *n,
                _ => *k,
            },
            _ => 0,
        }
    }

    /// The strides of a batched matmul's left operand, right operand and output.
    pub fn batch_strides(&self) -> Option<[Strides; 3]> {
        match self {
            Op::BatchMatmul { lhs, rhs, out, .. } => {
                let of = |axes: &str| Strides::row_major(axes, |c| self.batch_axis(c));
                Some([of(lhs), of(rhs), of(out)])
            }
            _ => None,
        }
    }
}

/// A 2-D convolution, NCHW input and FCRS weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub f: usize,
    pub r: usize,
    pub s: usize,
    pub stride: usize,
    pub pad: usize,
}

impl Conv {
    /// Output height and width.
    pub fn out_hw(&self) -> (usize, usize) {
        (
            (self.h + 2 * self.pad - self.r) / self.stride + 1,
            (self.w + 2 * self.pad - self.s) / self.stride + 1,
        )
    }
}

/// One benchmark case.
#[derive(Clone, Debug)]
pub struct Workload {
    pub suite: String,
    pub name: String,
    pub op: Op,
    /// The workload's entry as written in the file (reported as `shape`).
    pub shape: Value,
}

fn field(entry: &Map<String, Value>, key: &str, what: &str) -> Result<usize, String> {
    entry
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("{what}: `{key}` must be a positive integer"))
}

/// Parses one workload entry of `suite`.
fn workload(suite: &str, entry: &Value) -> Result<Workload, String> {
    let obj = entry
        .as_object()
        .ok_or_else(|| format!("suite `{suite}`: every workload must be an object"))?;
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("suite `{suite}`: a workload has no `name`"))?
        .to_string();
    let what = format!("{suite}/{name}");
    let f = |k: &str| field(obj, k, &what);
    let op = if obj.contains_key("op") {
        Op::Stage(crate::stages::Stage::parse(obj, &f)?)
    } else if obj.contains_key("R") {
        let conv = Conv {
            n: f("N")?,
            c: f("C")?,
            h: f("H")?,
            w: f("W")?,
            f: f("F")?,
            r: f("R")?,
            s: f("S")?,
            stride: f("stride")?,
            pad: obj.get("pad").and_then(Value::as_u64).unwrap_or(0) as usize,
        };
        if conv.h + 2 * conv.pad < conv.r || conv.w + 2 * conv.pad < conv.s {
            return Err(format!(
                "{what}: the filter is larger than the padded input"
            ));
        }
        Op::Conv2d(conv)
    } else if obj.contains_key("B") {
        let einsum = obj
            .get("einsum")
            .and_then(Value::as_str)
            .unwrap_or("bmk,bkn->bmn");
        let (lhs, rhs, out) = parse_einsum(einsum).map_err(|e| format!("{what}: {e}"))?;
        Op::BatchMatmul {
            b: f("B")?,
            m: f("M")?,
            n: f("N")?,
            k: f("K")?,
            lhs,
            rhs,
            out,
        }
    } else {
        let (m, n, k) = (f("M")?, f("N")?, f("K")?);
        match obj.get("epilogue").map(|e| e.as_str()) {
            None => Op::Matmul { m, n, k },
            Some(Some("bias_relu")) => Op::GemmBiasRelu { m, n, k },
            Some(_) => {
                return Err(format!(
                    "{what}: `epilogue` must be \"bias_relu\" (the only fused epilogue here)"
                ))
            }
        }
    };
    Ok(Workload {
        suite: suite.to_string(),
        name,
        op,
        shape: entry.clone(),
    })
}

/// Splits `bkm,bkn->bmn` into its three axis strings and checks it is a batched matmul over
/// `b, m, n, k`: the left operand has `b, m, k`, the right `b, k, n`, the output `b, m, n`
/// (each in any order).
pub fn parse_einsum(einsum: &str) -> Result<(String, String, String), String> {
    let bad = || format!("einsum `{einsum}`: expected e.g. `bmk,bkn->bmn`");
    let (ins, out) = einsum.split_once("->").ok_or_else(bad)?;
    let (lhs, rhs) = ins.split_once(',').ok_or_else(bad)?;
    let (lhs, rhs, out) = (lhs.trim(), rhs.trim(), out.trim());
    let sorted = |s: &str| {
        let mut v: Vec<char> = s.chars().collect();
        v.sort_unstable();
        v.into_iter().collect::<String>()
    };
    if sorted(lhs) != "bkm" || sorted(rhs) != "bkn" || sorted(out) != "bmn" {
        return Err(format!(
            "einsum `{einsum}`: the operands must hold the axes b,m,k and b,k,n and the output b,m,n"
        ));
    }
    Ok((lhs.to_string(), rhs.to_string(), out.to_string()))
}

/// Every suite in `text` (a workloads file), in [`SUITE_ORDER`] then sorted, plus the hidden
/// smoke suite.
pub fn load(text: &str) -> Result<Vec<(String, Vec<Workload>)>, String> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| format!("the workloads file is not JSON: {e}"))?;
    let obj = root
        .as_object()
        .ok_or("the workloads file must be an object of suites")?;
    let mut names: Vec<&str> = SUITE_ORDER
        .iter()
        .copied()
        .filter(|s| obj.contains_key(*s))
        .collect();
    let mut extra: Vec<&str> = obj
        .iter()
        .filter(|(k, v)| !k.starts_with('_') && v.is_array() && !SUITE_ORDER.contains(&k.as_str()))
        .map(|(k, _)| k.as_str())
        .collect();
    extra.sort_unstable();
    names.extend(extra);
    let mut suites = Vec::new();
    for name in names {
        let entries = obj
            .get(name)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("suite `{name}` must be an array"))?;
        let list = entries
            .iter()
            .map(|e| workload(name, e))
            .collect::<Result<Vec<_>, _>>()?;
        suites.push((name.to_string(), list));
    }
    suites.push((SMOKE_SUITE.to_string(), smoke()?));
    Ok(suites)
}

/// Tiny kernels for the smoke test: a 64³ matmul, a strided padded convolution and a
/// transposed batched matmul.
fn smoke() -> Result<Vec<Workload>, String> {
    [
        json!({"name": "mm64", "M": 64, "N": 64, "K": 64}),
        json!({"name": "conv_s2p1", "N": 2, "C": 3, "H": 9, "W": 11, "F": 5, "R": 3, "S": 3, "stride": 2, "pad": 1}),
        json!({"name": "bmm_t", "B": 3, "M": 16, "N": 8, "K": 12, "einsum": "bkm,bkn->bmn"}),
    ]
    .iter()
    .map(|e| workload(SMOKE_SUITE, e))
    .collect()
}

/// `S * p + r - P` written plainly (`p + r` when S = 1 and P = 0).
fn affine(stride: usize, out: &str, filter: &str, pad: usize) -> String {
    let mut s = if stride == 1 {
        format!("{out} + {filter}")
    } else {
        format!("{stride} * {out} + {filter}")
    };
    if pad > 0 {
        s.push_str(&format!(" - {pad}"));
    }
    s
}

/// The kernel statement and its tensors `(name, shape, is_output)` in parameter order.
pub fn kernel_text(op: &Op) -> (String, Vec<(String, Vec<usize>, bool)>) {
    match op {
        Op::Matmul { m, n, k } => (
            "c[[i, j]] += a[[i, k]] * b[[k, j]]".to_string(),
            vec![
                ("a".into(), vec![*m, *k], false),
                ("b".into(), vec![*k, *n], false),
                ("c".into(), vec![*m, *n], true),
            ],
        ),
        Op::GemmBiasRelu { m, n, k } => (
            "c[[i, j]] += a[[i, k]] * b[[k, j]]; c[[i, j]] = relu(c[[i, j]] + bias[[j]])"
                .to_string(),
            vec![
                ("a".into(), vec![*m, *k], false),
                ("b".into(), vec![*k, *n], false),
                ("bias".into(), vec![*n], false),
                ("c".into(), vec![*m, *n], true),
            ],
        ),
        Op::BatchMatmul { lhs, rhs, out, .. } => {
            let size = |ch: char| op.batch_axis(ch);
            let idx = |s: &str| {
                s.chars()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let dims = |s: &str| s.chars().map(size).collect::<Vec<_>>();
            (
                format!(
                    "out[[{}]] += lhs[[{}]] * rhs[[{}]]",
                    idx(out),
                    idx(lhs),
                    idx(rhs)
                ),
                vec![
                    ("lhs".into(), dims(lhs), false),
                    ("rhs".into(), dims(rhs), false),
                    ("out".into(), dims(out), true),
                ],
            )
        }
        Op::Stage(stage) => stage.kernel_text(),
        Op::Conv2d(cv) => {
            let (p, q) = cv.out_hw();
            (
                format!(
                    "y[[n, f, p, q]] += x[[n, c, {}, {}]] * w[[f, c, r, s]]",
                    affine(cv.stride, "p", "r", cv.pad),
                    affine(cv.stride, "q", "s", cv.pad)
                ),
                vec![
                    ("x".into(), vec![cv.n, cv.c, cv.h, cv.w], false),
                    ("w".into(), vec![cv.f, cv.c, cv.r, cv.s], false),
                    ("y".into(), vec![cv.n, cv.f, p, q], true),
                ],
            )
        }
    }
}

/// The `name=type` pairs `--dtypes` means for a kernel whose parameters are `params`
/// (`(name, is_output)` in order): a bare type (`bf16`) is the element type of the two
/// operands of the contraction (the first two inputs; the output and any bias stay `f32`),
/// anything else is passed on as written (`a=bf16,b=bf16,c=f32`). Empty means all `f32`.
pub fn dtype_spec(spec: &str, params: &[(String, bool)]) -> String {
    let spec = spec.trim();
    if spec.is_empty() || spec.contains('=') {
        return spec.to_string();
    }
    params
        .iter()
        .filter(|(_, out)| !out)
        .take(2)
        .map(|(name, _)| format!("{name}={spec}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The operands' element type `--dtypes` asks for: the bare type, or for `name=type` pairs
/// the first type other than `f32` (`f32` when none is). For naming baselines before a
/// kernel exists; the kernel's own types decide what runs.
pub fn operand_dtype(spec: &str) -> Result<DType, String> {
    let mut first = DType::F32;
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let ty = part.split_once('=').map_or(part, |(_, t)| t.trim());
        let d = DType::from_name(ty).ok_or_else(|| {
            format!("--dtypes: `{ty}` is not an element type: use f32, f16 or bf16")
        })?;
        if first == DType::F32 {
            first = d;
        }
    }
    Ok(first)
}

impl Workload {
    /// The workload as a kernel with bound shapes, every tensor `f32`.
    pub fn problem(&self) -> Result<Problem, String> {
        self.problem_with("")
    }

    /// The workload with the element types `dtypes` asks for (see [`dtype_spec`]).
    pub fn problem_with(&self, dtypes: &str) -> Result<Problem, String> {
        let (text, tensors) = kernel_text(&self.op);
        let decl: Vec<(String, bool)> = tensors.iter().map(|(n, _, o)| (n.clone(), *o)).collect();
        let kernel = parse_text(&self.name, &text, Some(&decl))
            .map_err(|e| format!("{}: kernel `{text}`: {e}", self.name))?
            .with_dtypes(&dtype_spec(dtypes, &decl))
            .map_err(|e| format!("{}: --dtypes: {e}", self.name))?;
        let shapes: Vec<Vec<usize>> = tensors.into_iter().map(|(_, s, _)| s).collect();
        Problem::new(kernel, shapes).map_err(|e| format!("{}: {e}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_committed_workload_binds() {
        let suites = load(WORKLOADS_JSON).unwrap();
        let names: Vec<&str> = suites.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(&names[..6], &SUITE_ORDER);
        for (_, list) in &suites {
            for w in list {
                let p = w.problem().unwrap();
                assert!(p.flops() > 0.0, "{}", w.name);
            }
        }
    }

    #[test]
    fn conv_flops_and_output_shape() {
        let suites = load(WORKLOADS_JSON).unwrap();
        let r0 = suites
            .iter()
            .flat_map(|(_, l)| l)
            .find(|w| w.name == "R0")
            .unwrap();
        let p = r0.problem().unwrap();
        assert_eq!(p.shapes[2], vec![1, 64, 112, 112]);
        // 2 · N·F·P·Q · C·R·S
        assert_eq!(p.flops(), 2.0 * (64 * 112 * 112 * 3 * 7 * 7) as f64);
        assert_eq!(affine(2, "p", "r", 3), "2 * p + r - 3");
        assert_eq!(affine(1, "q", "s", 0), "q + s");
    }

    #[test]
    fn dtypes_name_the_contraction_operands() {
        let suites = load(WORKLOADS_JSON).unwrap();
        let find = |n: &str| {
            suites
                .iter()
                .flat_map(|(_, l)| l)
                .find(|w| w.name == n)
                .unwrap()
                .clone()
        };
        let text = |w: &Workload, d: &str| w.problem_with(d).unwrap().kernel.dtypes_text();
        assert_eq!(text(&find("M1"), "bf16"), "a=bf16,b=bf16,c=f32");
        assert_eq!(text(&find("R1"), "f16"), "x=f16,w=f16,y=f32");
        assert_eq!(text(&find("BMM1"), "bf16"), "lhs=bf16,rhs=bf16,out=f32");
        let bolt = find("BR3");
        assert!(matches!(bolt.op, Op::GemmBiasRelu { .. }));
        assert_eq!(text(&bolt, "bf16"), "a=bf16,b=bf16,bias=f32,c=f32");
        assert_eq!(text(&bolt, ""), "a=f32,b=f32,bias=f32,c=f32");
        assert_eq!(text(&bolt, "a=f16,b=f16"), "a=f16,b=f16,bias=f32,c=f32");
        assert!(find("M1").problem_with("f64").is_err());
        assert_eq!(operand_dtype("bf16"), Ok(DType::BF16));
        assert_eq!(operand_dtype("a=f32, b=f16"), Ok(DType::F16));
        assert_eq!(operand_dtype(""), Ok(DType::F32));
        assert!(operand_dtype("a=f64").is_err());
        assert!(find("M1").problem_with("x=bf16").is_err());
        let bad = json!({"name": "e", "M": 2, "N": 2, "K": 2, "epilogue": "gelu"});
        assert!(workload("t", &bad).unwrap_err().contains("bias_relu"));
    }

    #[test]
    fn einsum_checks() {
        assert!(parse_einsum("bkm,bkn->bmn").is_ok());
        assert!(parse_einsum("bmk,bkn->bnm").is_ok());
        assert!(parse_einsum("bmk,bkn").is_err());
        assert!(parse_einsum("bmk,bkq->bmn").is_err());
    }
}

//! The kernel IR: what a `#[tensor_kernel]` statement means, independent of its spelling.
//!
//! A [`Kernel`] is one *main* statement plus any number of elementwise *epilogue* statements
//! on the same output:
//!
//! * index variables are numbered: first the **spatial** ones (those on the output, in the
//!   output's dimension order), then the **reduction** ones (only on the right, in order of
//!   first appearance);
//! * every tensor access is a list of [`Affine`] maps from index variables to a coordinate;
//! * the main statement is either a sum over all reduction indices ([`BodyKind::Sum`], from
//!   `+=`) or a plain elementwise assignment ([`BodyKind::Assign`], from `=`); in both cases
//!   the output is overwritten;
//! * each epilogue expression computes the new value of an output element and may read its
//!   current value through [`Expr::Output`].
//!
//! ```
//! use tensor_dsl_lang::{parse_text, ir::IndexKind};
//! let k = parse_text("matmul", "c[[i, j]] += a[[i, k]] * b[[k, j]]", None).unwrap();
//! assert_eq!(k.indices.len(), 3);
//! assert_eq!(k.indices[2].kind, IndexKind::Reduction);
//! assert_eq!(k.fingerprint().len(), 16);
//! ```

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::{Mutex, OnceLock};

/// Element type of a tensor parameter. Arithmetic is always done in `f32`: half-precision
/// inputs are widened when read, products accumulate in `f32`, and a half-precision output
/// is rounded (to nearest, ties to even) once, after the epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum DType {
    #[default]
    F32,
    /// IEEE 754 binary16 (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`): `f32`'s exponent range with an 8-bit significand.
    BF16,
}

impl DType {
    /// Every element type, in a stable order.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// The Rust spelling of the type (`f32`, `f16`, `bf16`), also used in records and on
    /// the command line.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// The type for a name written by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor parameter of the kernel function, in declaration order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    pub dtype: DType,
    /// Number of dimensions, as used in the statements.
    pub rank: usize,
    /// `true` for the single `&mut Tensor` parameter.
    pub is_output: bool,
}

/// Whether an index variable lives on the output or is summed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IndexKind {
    Spatial,
    Reduction,
}

/// An index variable (`i`, `k`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Index {
    pub name: String,
    pub kind: IndexKind,
}

/// `sum(coef * index) + offset`, terms sorted by index id, no zero coefficients.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Affine {
    pub terms: Vec<(usize, i64)>,
    pub offset: i64,
}

impl Affine {
    /// The map `index` (coefficient 1, no offset).
    pub fn var(index: usize) -> Self {
        Affine {
            terms: vec![(index, 1)],
            offset: 0,
        }
    }

    /// The constant map `c`.
    pub fn constant(c: i64) -> Self {
        Affine {
            terms: Vec::new(),
            offset: c,
        }
    }

    /// If this map is a plain index variable, its id.
    pub fn as_var(&self) -> Option<usize> {
        match (self.terms.as_slice(), self.offset) {
            ([(v, 1)], 0) => Some(*v),
            _ => None,
        }
    }

    /// Evaluates the map at the given index values (indexed by index id).
    pub fn eval(&self, values: &[i64]) -> i64 {
        self.terms
            .iter()
            .fold(self.offset, |acc, &(v, c)| acc + c * values[v])
    }

    /// `self + other` in canonical form.
    pub fn add(&self, other: &Affine) -> Affine {
        let mut terms = self.terms.clone();
        for &(v, c) in &other.terms {
            match terms.iter_mut().find(|(w, _)| *w == v) {
                Some(t) => t.1 += c,
                None => terms.push((v, c)),
            }
        }
        terms.retain(|&(_, c)| c != 0);
        terms.sort_unstable();
        Affine {
            terms,
            offset: self.offset + other.offset,
        }
    }

    /// `k * self` in canonical form.
    pub fn scale(&self, k: i64) -> Affine {
        if k == 0 {
            return Affine::default();
        }
        Affine {
            terms: self.terms.iter().map(|&(v, c)| (v, c * k)).collect(),
            offset: self.offset * k,
        }
    }

    /// Smallest and largest value over the box `0 <= index < extents[index]` (saturating at
    /// the ends of `i64` for absurd extents, so it never overflows).
    pub fn range(&self, extents: &[usize]) -> (i64, i64) {
        let mut lo = self.offset;
        let mut hi = self.offset;
        for &(v, c) in &self.terms {
            let last = i64::try_from(extents[v].saturating_sub(1)).unwrap_or(i64::MAX);
            let top = c.saturating_mul(last);
            if c > 0 {
                hi = hi.saturating_add(top);
            } else {
                lo = lo.saturating_add(top);
            }
        }
        (lo, hi)
    }

    /// Writes the map with the given index names, e.g. `2*p + r - 1`.
    pub fn write(&self, out: &mut String, names: &dyn Fn(usize) -> String) {
        let mut first = true;
        for &(v, c) in &self.terms {
            let name = names(v);
            match (first, c) {
                (true, 1) => out.push_str(&name),
                (true, -1) => {
                    let _ = write!(out, "-{name}");
                }
                (true, c) => {
                    let _ = write!(out, "{c}*{name}");
                }
                (false, 1) => {
                    let _ = write!(out, " + {name}");
                }
                (false, -1) => {
                    let _ = write!(out, " - {name}");
                }
                (false, c) if c < 0 => {
                    let _ = write!(out, " - {}*{name}", -c);
                }
                (false, c) => {
                    let _ = write!(out, " + {c}*{name}");
                }
            }
            first = false;
        }
        if first {
            let _ = write!(out, "{}", self.offset);
        } else if self.offset > 0 {
            let _ = write!(out, " + {}", self.offset);
        } else if self.offset < 0 {
            let _ = write!(out, " - {}", -self.offset);
        }
    }
}

/// A read of an input tensor at affine coordinates. Coordinates outside the tensor read 0.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Access {
    /// Parameter id (index into [`Kernel::params`]).
    pub tensor: usize,
    pub dims: Vec<Affine>,
}

/// Binary arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
        }
    }
}

/// Built-in functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Func {
    Relu,
    /// Exact GELU: `0.5 * x * (1 + erf(x / sqrt(2)))`.
    Gelu,
    Sigmoid,
    Tanh,
    Exp,
    Sqrt,
    Max,
    Min,
    /// Natural logarithm.
    Log,
    Abs,
    /// `pow(x, y)` = x^y.
    Pow,
    /// The error function.
    Erf,
    /// `x * sigmoid(x)` (also called swish).
    Silu,
    /// `1 / sqrt(x)`.
    Rsqrt,
}

impl Func {
    pub const ALL: [Func; 14] = [
        Func::Relu,
        Func::Gelu,
        Func::Sigmoid,
        Func::Tanh,
        Func::Exp,
        Func::Sqrt,
        Func::Max,
        Func::Min,
        Func::Log,
        Func::Abs,
        Func::Pow,
        Func::Erf,
        Func::Silu,
        Func::Rsqrt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Func::Relu => "relu",
            Func::Gelu => "gelu",
            Func::Sigmoid => "sigmoid",
            Func::Tanh => "tanh",
            Func::Exp => "exp",
            Func::Sqrt => "sqrt",
            Func::Max => "max",
            Func::Min => "min",
            Func::Log => "log",
            Func::Abs => "abs",
            Func::Pow => "pow",
            Func::Erf => "erf",
            Func::Silu => "silu",
            Func::Rsqrt => "rsqrt",
        }
    }

    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    pub fn arity(self) -> usize {
        match self {
            Func::Max | Func::Min | Func::Pow => 2,
            _ => 1,
        }
    }
}

/// A scalar expression evaluated at one point of the iteration space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// A literal constant.
    Lit(f64),
    /// A read of an input tensor.
    Access(Access),
    /// The current value of the output element (epilogues only).
    Output,
    /// The value of intermediate `t` ([`Staged::stages`]) at its own indices: a kernel of
    /// several stages reads `m[[i]]` with the indices `m` was defined with.
    Temp(usize),
    Neg(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
}

impl Expr {
    /// Calls `f` on every tensor access in the expression, left to right.
    pub fn visit_accesses<'a>(&'a self, f: &mut dyn FnMut(&'a Access)) {
        match self {
            Expr::Lit(_) | Expr::Output | Expr::Temp(_) => {}
            Expr::Access(a) => f(a),
            Expr::Neg(e) => e.visit_accesses(f),
            Expr::Bin(_, a, b) => {
                a.visit_accesses(f);
                b.visit_accesses(f);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.visit_accesses(f)),
        }
    }

    /// Writes the expression in the language's own syntax.
    pub fn write(&self, out: &mut String, k: &Kernel, idx: &dyn Fn(usize) -> String) {
        match self {
            Expr::Lit(v) => {
                let _ = write!(out, "{v:?}");
            }
            Expr::Access(a) => {
                out.push_str(&k.params[a.tensor].name);
                out.push_str("[[");
                for (d, m) in a.dims.iter().enumerate() {
                    if d > 0 {
                        out.push_str(", ");
                    }
                    m.write(out, idx);
                }
                out.push_str("]]");
            }
            Expr::Output => {
                out.push_str(&k.params[k.output].name);
                out.push_str("[[");
                let spatial = k.spatial();
                for (d, v) in spatial.iter().enumerate() {
                    if d > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&idx(*v));
                }
                out.push_str("]]");
            }
            Expr::Temp(t) => match k.staged.as_deref().and_then(|s| s.stages.get(*t)) {
                Some(stage) => {
                    out.push_str(&stage.name);
                    out.push_str("[[");
                    for (d, v) in stage.dims.iter().enumerate() {
                        if d > 0 {
                            out.push_str(", ");
                        }
                        out.push_str(&idx(*v));
                    }
                    out.push_str("]]");
                }
                None => {
                    let _ = write!(out, "t{t}[[?]]");
                }
            },
            Expr::Neg(e) => {
                out.push_str("-(");
                e.write(out, k, idx);
                out.push(')');
            }
            Expr::Bin(op, a, b) => {
                out.push('(');
                a.write(out, k, idx);
                let _ = write!(out, " {} ", op.symbol());
                b.write(out, k, idx);
                out.push(')');
            }
            Expr::Call(f, args) => {
                out.push_str(f.name());
                out.push('(');
                for (n, a) in args.iter().enumerate() {
                    if n > 0 {
                        out.push_str(", ");
                    }
                    a.write(out, k, idx);
                }
                out.push(')');
            }
        }
    }
}

/// `+=` (sum over the reduction indices) or `=` (elementwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BodyKind {
    Sum,
    Assign,
}

/// A validated kernel. Build one with [`crate::parse_text`] or `#[tensor_kernel]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// The function's name (not part of the fingerprint).
    pub name: String,
    pub params: Vec<Param>,
    /// Parameter id of the output.
    pub output: usize,
    /// Spatial indices first (output dimension order), then reduction indices.
    pub indices: Vec<Index>,
    pub kind: BodyKind,
    /// The main statement's right-hand side.
    pub body: Expr,
    /// Elementwise epilogues, applied in order to each output element.
    pub epilogue: Vec<Expr>,
    /// Intermediates, reducers other than `+=`'s sum and explicit index ranges: `None` for
    /// the one-statement kernels (einsum plus epilogues). See [`Staged`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<Box<Staged>>,
}

/// How a reduction statement (`m[[i]] = max(x[[i, j]]);`) combines the values of the
/// indices on its right that are not on its left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reducer {
    Sum,
    Max,
    Min,
    /// Product.
    Prod,
    /// The sum divided by the number of points of the reduced indices (padding included).
    Mean,
}

impl Reducer {
    /// Every reducer, in a stable order.
    pub const ALL: [Reducer; 5] = [
        Reducer::Sum,
        Reducer::Max,
        Reducer::Min,
        Reducer::Prod,
        Reducer::Mean,
    ];

    /// The function name that spells it: `sum`, `max`, `min`, `prod`, `mean`.
    pub fn name(self) -> &'static str {
        match self {
            Reducer::Sum => "sum",
            Reducer::Max => "max",
            Reducer::Min => "min",
            Reducer::Prod => "prod",
            Reducer::Mean => "mean",
        }
    }

    /// The reducer spelled `name`, if any.
    pub fn from_name(name: &str) -> Option<Reducer> {
        Reducer::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The value of a reduction over nothing (and what a padded point contributes):
    /// 0, −∞, +∞, 1, 0.
    pub fn identity(self) -> f64 {
        match self {
            Reducer::Sum | Reducer::Mean => 0.0,
            Reducer::Max => f64::NEG_INFINITY,
            Reducer::Min => f64::INFINITY,
            Reducer::Prod => 1.0,
        }
    }

    /// `acc` combined with `v` (for `Mean`, the running sum).
    pub fn combine(self, acc: f64, v: f64) -> f64 {
        match self {
            Reducer::Sum | Reducer::Mean => acc + v,
            Reducer::Max => acc.max(v),
            Reducer::Min => acc.min(v),
            Reducer::Prod => acc * v,
        }
    }
}

/// One intermediate of a kernel of several stages: `m[[i]] = max(x[[i, j]]);` (a
/// reduction) or `r[[i]] = rsqrt(v[[i]] + 1e-5);` (elementwise). Intermediates are computed
/// in `f32` whatever the tensors' element types, and live only inside the kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    /// The name it is written with (not part of the fingerprint).
    pub name: String,
    /// The index ids it keeps, in its dimension order.
    pub dims: Vec<usize>,
    /// `None` for an elementwise statement.
    pub reducer: Option<Reducer>,
    /// The index ids it reduces over (on the right, not on the left), in order of first use.
    pub over: Vec<usize>,
    pub body: Expr,
}

/// What a kernel of several stages adds to the one-statement form. The output statement is
/// [`Kernel::body`] (inside its reducer, if any) followed by [`Kernel::epilogue`]; the
/// intermediates come before it, in order, each reading only inputs and earlier
/// intermediates. A point of a reduction at which some affine access falls outside its
/// tensor contributes the reducer's identity (−∞ for `max`), so `max` pooling pads with −∞.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Staged {
    pub stages: Vec<Stage>,
    /// The output statement's reducer (`y[[i]] = min(x[[i, j]]);`); `None` when it is
    /// elementwise.
    pub reducer: Option<Reducer>,
    /// The index ids the output statement reduces over.
    pub over: Vec<usize>,
    /// Index extents given by `let r = 0..3;` (index id, extent): window sizes that no
    /// tensor's shape says.
    pub ranges: Vec<(usize, usize)>,
}

impl Kernel {
    /// Ids of the spatial indices; the output's dimension `d` is index `d`.
    pub fn spatial(&self) -> Vec<usize> {
        self.ids(IndexKind::Spatial)
    }

    /// Ids of the reduction indices.
    pub fn reduction(&self) -> Vec<usize> {
        self.ids(IndexKind::Reduction)
    }

    /// The intermediates of a kernel of several stages (none for a one-statement kernel).
    pub fn stages(&self) -> &[Stage] {
        self.staged.as_deref().map_or(&[], |s| s.stages.as_slice())
    }

    /// Whether the kernel has intermediates, a reducer other than `+=` or index ranges:
    /// such kernels run on the row template ([`Staged`]), not the einsum templates.
    pub fn is_staged(&self) -> bool {
        self.staged.is_some()
    }

    fn ids(&self, kind: IndexKind) -> Vec<usize> {
        (0..self.indices.len())
            .filter(|&i| self.indices[i].kind == kind)
            .collect()
    }

    /// The element types of the parameters, in declaration order, as records and the CLI
    /// write them: `a=bf16,b=bf16,c=f32`.
    pub fn dtypes_text(&self) -> String {
        self.params
            .iter()
            .map(|p| format!("{}={}", p.name, p.dtype))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The same kernel with some parameters' element types changed, from `name=dtype`
    /// pairs separated by commas (`a=bf16,b=bf16,c=f32`); parameters not named keep theirs.
    /// An unknown parameter or type is an error that says what exists.
    ///
    /// ```
    /// use tensor_dsl_lang::{parse_text, ir::DType};
    /// let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    /// let h = k.with_dtypes("a=bf16, b=bf16").unwrap();
    /// assert_eq!(h.params[0].dtype, DType::BF16);
    /// assert_eq!(h.dtypes_text(), "a=bf16,b=bf16,c=f32");
    /// assert_ne!(h.fingerprint(), k.fingerprint());
    /// assert!(k.with_dtypes("x=f16").is_err());
    /// ```
    pub fn with_dtypes(&self, spec: &str) -> Result<Kernel, String> {
        let mut k = self.clone();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, ty) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: write `name=type`, e.g. `a=bf16`"))?;
            let (name, ty) = (name.trim(), ty.trim());
            let dtype = DType::from_name(ty)
                .ok_or_else(|| format!("`{ty}` is not an element type: use f32, f16 or bf16"))?;
            let names: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
            let param = k
                .params
                .iter_mut()
                .find(|p| p.name == name)
                .ok_or_else(|| {
                    format!(
                        "`{name}` is not a parameter of `{}` (its parameters: {})",
                        self.name,
                        names.join(", ")
                    )
                })?;
            param.dtype = dtype;
        }
        Ok(k)
    }

    /// The kernel that **adds its result to what the output holds** (BLAS's `beta = 1`,
    /// what `#[tensor_kernel(accumulate)]` asks for): `c ← c + f(inputs)`, where `f` is the
    /// whole kernel, epilogues included (`c ← c + relu(a·b + bias)` is a residual add).
    ///
    /// It is an ordinary kernel: one more input, named after the output (`c_prev`, with
    /// more underscores if that name is taken), holds the output's previous contents, and a
    /// last epilogue adds it, so every template and backend runs it unchanged. The caller
    /// passes a copy of the output as that input ([`Kernel::inputs`] lists it last).
    ///
    /// ```
    /// use tensor_dsl_lang::parse_text;
    /// let k = parse_text("mm", "c[[i, j]] += a[[i, k]] * b[[k, j]]", None).unwrap();
    /// let acc = k.accumulating();
    /// assert_eq!(
    ///     acc.to_string(),
    ///     "c[[i, j]] += (a[[i, k]] * b[[k, j]]); c[[i, j]] = (c[[i, j]] + c_prev[[i, j]]);"
    /// );
    /// assert_eq!(acc.params[*acc.inputs().last().unwrap()].name, "c_prev");
    /// ```
    pub fn accumulating(&self) -> Kernel {
        let mut k = self.clone();
        let out = &self.params[self.output];
        let mut name = format!("{}_prev", out.name);
        while self.params.iter().any(|p| p.name == name) {
            name.push('_');
        }
        k.params.push(Param {
            name,
            dtype: out.dtype,
            rank: out.rank,
            is_output: false,
        });
        let prev = Expr::Access(Access {
            tensor: k.params.len() - 1,
            dims: self.spatial().into_iter().map(Affine::var).collect(),
        });
        k.epilogue.push(Expr::Bin(
            BinOp::Add,
            Box::new(Expr::Output),
            Box::new(prev),
        ));
        k
    }

    /// Parameter ids of the inputs, in declaration order.
    pub fn inputs(&self) -> Vec<usize> {
        (0..self.params.len())
            .filter(|&p| !self.params[p].is_output)
            .collect()
    }

    /// Every input access, main statement first, then epilogues.
    pub fn accesses(&self) -> Vec<&Access> {
        let mut out = Vec::new();
        for s in self.stages() {
            s.body.visit_accesses(&mut |a| out.push(a));
        }
        self.body.visit_accesses(&mut |a| out.push(a));
        for e in &self.epilogue {
            e.visit_accesses(&mut |a| out.push(a));
        }
        out
    }

    /// Floating-point operations per output element, counting each `+ - * /`, negation and
    /// call as one, and the reduction's accumulation as one per reduction point.
    pub fn flops(&self, extents: &[usize]) -> f64 {
        fn ops(e: &Expr) -> f64 {
            match e {
                Expr::Lit(_) | Expr::Access(_) | Expr::Output | Expr::Temp(_) => 0.0,
                Expr::Neg(a) => 1.0 + ops(a),
                Expr::Bin(_, a, b) => 1.0 + ops(a) + ops(b),
                Expr::Call(_, args) => 1.0 + args.iter().map(ops).sum::<f64>(),
            }
        }
        let spatial: f64 = self.spatial().iter().map(|&i| extents[i] as f64).product();
        let red: f64 = self
            .reduction()
            .iter()
            .map(|&i| extents[i] as f64)
            .product();
        let epi: f64 = self.epilogue.iter().map(ops).sum();
        if let Some(st) = self.staged.as_deref() {
            let points = |ids: &[usize]| ids.iter().map(|&i| extents[i] as f64).product::<f64>();
            let stages: f64 = st
                .stages
                .iter()
                .map(|s| {
                    let per = ops(&s.body) + if s.reducer.is_some() { 1.0 } else { 0.0 };
                    points(&s.dims) * points(&s.over) * per
                })
                .sum();
            let per = ops(&self.body) + if st.reducer.is_some() { 1.0 } else { 0.0 };
            return stages + spatial * (points(&st.over) * per + epi);
        }
        let body = ops(&self.body) + if self.kind == BodyKind::Sum { 1.0 } else { 0.0 };
        spatial * (red * body + epi)
    }

    /// The canonical form: index variables renamed by position (`s0..`, `r0..`), tensors by
    /// parameter position (`t0..`), the function name dropped. Two kernels with the same
    /// canonical form compute the same function of their arguments.
    pub fn canonical(&self) -> String {
        let idx = |i: usize| match self.indices[i].kind {
            IndexKind::Spatial => format!("s{i}"),
            IndexKind::Reduction => format!("r{}", i - self.spatial().len()),
        };
        let mut renamed = self.clone();
        for (p, param) in renamed.params.iter_mut().enumerate() {
            param.name = format!("t{p}");
        }
        let mut out = String::from("tensor-dsl-ir/1\n");
        for p in &renamed.params {
            let _ = writeln!(
                out,
                "param {} {} rank={}{}",
                p.name,
                p.dtype.name(),
                p.rank,
                if p.is_output { " out" } else { "" }
            );
        }
        if let Some(st) = self.staged.as_deref() {
            let mut renamed_st = st.clone();
            for (t, s) in renamed_st.stages.iter_mut().enumerate() {
                s.name = format!("m{t}");
            }
            renamed.staged = Some(Box::new(renamed_st));
            for &(v, n) in &st.ranges {
                let _ = writeln!(out, "range {} 0..{n}", idx(v));
            }
            for t in 0..renamed.stages().len() {
                write_stage(&mut out, &renamed, t, &idx);
                out.push('\n');
            }
            if let Some(r) = st.reducer {
                let _ = write!(out, "reduce {} ", r.name());
            }
        }
        let _ = write!(
            out,
            "{} {} ",
            match self.kind {
                BodyKind::Sum => "sum",
                BodyKind::Assign => "assign",
            },
            self.reduction().len()
        );
        Expr::Output.write(&mut out, &renamed, &idx);
        out.push_str(match self.kind {
            BodyKind::Sum => " += ",
            BodyKind::Assign => " = ",
        });
        self.body.write(&mut out, &renamed, &idx);
        out.push('\n');
        for e in &self.epilogue {
            out.push_str("epilogue ");
            e.write(&mut out, &renamed, &idx);
            out.push('\n');
        }
        out
    }

    /// A stable 64-bit hash of [`Kernel::canonical`], as 16 hex digits. The same statement
    /// gives the same fingerprint on every build and machine.
    pub fn fingerprint(&self) -> String {
        // Every call of a kernel needs its fingerprint (memo and record keys); formatting the
        // canonical text each time cost more than a small kernel's arithmetic. Memoized by
        // address, checked by equality (an address reused by another kernel misses).
        type Memo = Mutex<HashMap<usize, (Kernel, String)>>;
        static MEMO: OnceLock<Memo> = OnceLock::new();
        let memo = MEMO.get_or_init(Default::default);
        let addr = self as *const Kernel as usize;
        if let Some((k, fp)) = memo.lock().unwrap_or_else(|p| p.into_inner()).get(&addr) {
            if k == self {
                return fp.clone();
            }
        }
        let fp = format!("{:016x}", fnv1a64(self.canonical().as_bytes()));
        let mut map = memo.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= 256 {
            map.clear();
        }
        map.insert(addr, (self.clone(), fp.clone()));
        fp
    }
}

impl fmt::Display for Kernel {
    /// The kernel in the language's own syntax, with its own names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let idx = |i: usize| self.indices[i].name.clone();
        let mut out = String::new();
        if let Some(st) = self.staged.as_deref() {
            for &(v, n) in &st.ranges {
                let _ = write!(out, "let {} = 0..{n}; ", idx(v));
            }
            for t in 0..st.stages.len() {
                write_stage(&mut out, self, t, &idx);
                out.push(' ');
            }
            Expr::Output.write(&mut out, self, &idx);
            out.push_str(" = ");
            match st.reducer {
                Some(r) => {
                    out.push_str(r.name());
                    out.push('(');
                    self.body.write(&mut out, self, &idx);
                    out.push(')');
                }
                None => self.body.write(&mut out, self, &idx),
            }
        } else {
            Expr::Output.write(&mut out, self, &idx);
            out.push_str(match self.kind {
                BodyKind::Sum => " += ",
                BodyKind::Assign => " = ",
            });
            self.body.write(&mut out, self, &idx);
        }
        out.push(';');
        for e in &self.epilogue {
            out.push(' ');
            Expr::Output.write(&mut out, self, &idx);
            out.push_str(" = ");
            e.write(&mut out, self, &idx);
            out.push(';');
        }
        f.write_str(&out)
    }
}

/// Writes an intermediate's statement, `m[[i]] = max(x[[i, j]]);`.
fn write_stage(out: &mut String, k: &Kernel, t: usize, idx: &dyn Fn(usize) -> String) {
    let Some(s) = k.stages().get(t) else {
        return;
    };
    Expr::Temp(t).write(out, k, idx);
    out.push_str(" = ");
    match s.reducer {
        Some(r) => {
            out.push_str(r.name());
            out.push('(');
            s.body.write(out, k, idx);
            out.push(')');
        }
        None => s.body.write(out, k, idx),
    }
    out.push(';');
}

/// FNV-1a, 64 bit: tiny, stable across platforms and Rust versions (unlike `DefaultHasher`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

//! Code generators. The C generator ([`c`]) owns the loop-nest shape; the pieces both C and
//! CUDA need — scalar expressions, tensor accesses with zero padding, built-in functions —
//! live here so the two backends print the same arithmetic.

pub mod c;
pub mod cuda;

use crate::ir::{Access, Affine, BinOp, Expr, Func, Kernel};
use std::fmt::Write as _;

/// Strides of a row-major shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The C name of index variable `i`: `i_<name>` for ASCII names, `i_<id>` otherwise.
pub fn index_name(kernel: &Kernel, i: usize) -> String {
    let n = &kernel.indices[i].name;
    if n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        format!("i_{n}")
    } else {
        format!("i_{i}")
    }
}

/// A `float` literal in C syntax.
pub fn float_lit(v: f64) -> String {
    let f = v as f32;
    if f.is_finite() {
        let s = format!("{f:?}");
        if s.contains(['.', 'e']) {
            format!("{s}f")
        } else {
            format!("{s}.0f")
        }
    } else if f > 0.0 {
        "INFINITY".into()
    } else {
        "(-INFINITY)".into()
    }
}

/// Helper functions for the built-ins, in C (also valid CUDA C with `__device__` added).
pub fn builtin_prelude(qualifier: &str) -> String {
    let mut s = String::new();
    for (name, body) in [
        ("relu", "return x > 0.0f ? x : 0.0f;"),
        (
            "gelu",
            "return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));",
        ),
        ("sigmoid", "return 1.0f / (1.0f + expf(-x));"),
    ] {
        let _ = writeln!(
            s,
            "{qualifier}static inline float td_{name}(float x) {{ {body} }}"
        );
    }
    s
}

/// Prints scalar expressions of one kernel as C.
pub struct ExprPrinter<'a> {
    pub kernel: &'a Kernel,
    pub shapes: &'a [&'a [usize]],
    pub extents: &'a [usize],
    /// C expression for the value of each index variable.
    pub index: Vec<String>,
    /// C name of each parameter's data pointer.
    pub tensor: Vec<String>,
    /// C expression for the current output value (epilogues).
    pub output: String,
    /// An access read from a packed buffer instead: (the access, the C expression).
    pub packed: Option<(Access, String)>,
}

impl ExprPrinter<'_> {
    fn affine(&self, a: &Affine) -> String {
        let mut s = String::new();
        a.write(&mut s, &|v| self.index[v].clone());
        s
    }

    /// The element of `a`, or 0 where the coordinates fall outside the tensor.
    pub fn access(&self, a: &Access) -> String {
        if let Some((p, expr)) = &self.packed {
            if p == a {
                return expr.clone();
            }
        }
        self.global(a)
    }

    /// The element of `a` read from global memory (never from a packed buffer).
    pub fn global(&self, a: &Access) -> String {
        let shape = self.shapes[a.tensor];
        let strides = strides(shape);
        let mut offset = Vec::new();
        let mut conds = Vec::new();
        for (d, map) in a.dims.iter().enumerate() {
            let c = self.affine(map);
            let (lo, hi) = map.range(self.extents);
            if lo < 0 {
                conds.push(format!("{c} >= 0"));
            }
            if hi >= shape[d] as i64 {
                conds.push(format!("{c} < {}", shape[d]));
            }
            let simple = map.as_var().is_some() || map.terms.is_empty();
            let c = if simple { c } else { format!("({c})") };
            match strides[d] {
                1 => offset.push(c),
                s => offset.push(format!("{s} * {c}")),
            }
        }
        let offset = if offset.is_empty() {
            "0".to_string()
        } else {
            offset.join(" + ")
        };
        let load = format!("{}[{offset}]", self.tensor[a.tensor]);
        if conds.is_empty() {
            load
        } else {
            format!("({} ? {load} : 0.0f)", conds.join(" && "))
        }
    }

    pub fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Lit(v) => float_lit(*v),
            Expr::Access(a) => self.access(a),
            Expr::Output => self.output.clone(),
            Expr::Neg(a) => format!("(-{})", self.expr(a)),
            Expr::Bin(op, a, b) => {
                let op = match op {
                    BinOp::Add => "+",
                    BinOp::Sub => "-",
                    BinOp::Mul => "*",
                    BinOp::Div => "/",
                };
                format!("({} {op} {})", self.expr(a), self.expr(b))
            }
            Expr::Call(f, args) => {
                let args: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                let name = match f {
                    Func::Relu => "td_relu",
                    Func::Gelu => "td_gelu",
                    Func::Sigmoid => "td_sigmoid",
                    Func::Tanh => "tanhf",
                    Func::Exp => "expf",
                    Func::Sqrt => "sqrtf",
                    Func::Max => "fmaxf",
                    Func::Min => "fminf",
                };
                format!("{name}({})", args.join(", "))
            }
        }
    }
}

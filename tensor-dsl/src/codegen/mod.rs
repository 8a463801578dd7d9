//! Code generators. Both print a loop nest lowered by [`crate::lower`] with the one
//! [`printer`] and their dialect; the pieces both need — scalar expressions, tensor accesses
//! with zero padding, built-in functions — live here so the two backends print the same
//! arithmetic.

pub mod c;
pub mod cuda;
pub mod printer;

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

/// `i=64 j=40 k=48`: each index and its extent (for the generated files' headers).
pub fn extents_text(kernel: &Kernel, extents: &[usize]) -> String {
    let ext: Vec<String> = kernel
        .indices
        .iter()
        .zip(extents)
        .map(|(i, e)| format!("{}={e}", i.name))
        .collect();
    ext.join(" ")
}

/// `why` made safe inside a C string literal of an `#error` line.
pub fn error_text(why: &str) -> String {
    why.chars()
        .map(|c| {
            if c == '"' || c == '\\' || c == '\n' {
                ' '
            } else {
                c
            }
        })
        .collect()
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

/// One coordinate of an element read: its C expression, whether that is a single name or
/// number (no parentheses needed inside an offset), and the range of values it can take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coord {
    pub expr: String,
    pub simple: bool,
    pub lo: i64,
    pub hi: i64,
}

/// The row-major offset (`48 * c0 + c1`) of an element at `coords` in a tensor of `shape`.
pub fn offset_expr(shape: &[usize], coords: &[Coord]) -> String {
    let strides = strides(shape);
    let offset: Vec<String> = coords
        .iter()
        .zip(&strides)
        .map(|(c, s)| {
            let e = if c.simple {
                c.expr.clone()
            } else {
                format!("({})", c.expr)
            };
            match s {
                1 => e,
                s => format!("{s} * {e}"),
            }
        })
        .collect();
    if offset.is_empty() {
        "0".to_string()
    } else {
        offset.join(" + ")
    }
}

/// The checks (`c >= 0`, `c < extent`) that a read at `coords` of a tensor of `shape` needs:
/// only those a coordinate's range can break.
pub fn bound_checks(shape: &[usize], coords: &[Coord]) -> Vec<String> {
    let mut conds = Vec::new();
    for (c, &n) in coords.iter().zip(shape) {
        if c.lo < 0 {
            conds.push(format!("{} >= 0", c.expr));
        }
        if c.hi >= n as i64 {
            conds.push(format!("{} < {n}", c.expr));
        }
    }
    conds
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
        let coords: Vec<Coord> = a
            .dims
            .iter()
            .map(|map| {
                let (lo, hi) = map.range(self.extents);
                Coord {
                    expr: self.affine(map),
                    simple: map.as_var().is_some() || map.terms.is_empty(),
                    lo,
                    hi,
                }
            })
            .collect();
        let conds = bound_checks(shape, &coords);
        let load = format!("{}[{}]", self.tensor[a.tensor], offset_expr(shape, &coords));
        if conds.is_empty() {
            load
        } else {
            format!("({} ? {load} : 0.0f)", conds.join(" && "))
        }
    }

    pub fn expr(&self, e: &Expr) -> String {
        self.expr_with(e, &|_| None)
    }

    /// Like [`expr`](Self::expr), but `read` may print an access itself (e.g. from a
    /// shared-memory tile); the accesses it declines are printed by [`access`](Self::access).
    pub fn expr_with(&self, e: &Expr, read: &dyn Fn(&Access) -> Option<String>) -> String {
        match e {
            Expr::Lit(v) => float_lit(*v),
            Expr::Access(a) => read(a).unwrap_or_else(|| self.access(a)),
            Expr::Output => self.output.clone(),
            Expr::Neg(a) => format!("(-{})", self.expr_with(a, read)),
            Expr::Bin(op, a, b) => {
                let op = match op {
                    BinOp::Add => "+",
                    BinOp::Sub => "-",
                    BinOp::Mul => "*",
                    BinOp::Div => "/",
                };
                format!(
                    "({} {op} {})",
                    self.expr_with(a, read),
                    self.expr_with(b, read)
                )
            }
            Expr::Call(f, args) => {
                let args: Vec<String> = args.iter().map(|a| self.expr_with(a, read)).collect();
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

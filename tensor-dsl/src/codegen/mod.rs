//! Code generators. Both print a loop nest lowered by [`crate::lower`] with the one
//! [`printer`] and their dialect; the pieces both need — scalar expressions, tensor accesses
//! with zero padding, built-in functions — live here so the two backends print the same
//! arithmetic.

pub mod c;
pub mod cuda;
pub mod cuda_async;
pub mod printer;
pub mod rows;
pub mod split_k;
pub mod tensor_map;
pub mod tensorcore;
pub mod wgmma;

use crate::ir::{Access, Affine, BinOp, DType, Expr, Func, Kernel};
use std::fmt::Write as _;

/// The C/CUDA type a buffer of `dtype` is stored as: `float`, or the 16-bit pattern of a
/// half-precision value as `unsigned short` (no `_Float16` / `__half`: NVRTC without
/// headers has neither, and a C compiler may lack `_Float16`).
pub fn storage_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float",
        DType::F16 | DType::BF16 => "unsigned short",
    }
}

/// `value` (an element of type `dtype`, as stored) widened to `float`.
pub fn load_as_f32(dtype: DType, value: &str) -> String {
    match dtype {
        DType::F32 => value.to_string(),
        DType::F16 => format!("td_f16_to_f32({value})"),
        DType::BF16 => format!("td_bf16_to_f32({value})"),
    }
}

/// The `float` `value` rounded (to nearest, ties to even) to `dtype`'s storage.
pub fn store_from_f32(dtype: DType, value: &str) -> String {
    match dtype {
        DType::F32 => value.to_string(),
        DType::F16 => format!("td_f32_to_f16({value})"),
        DType::BF16 => format!("td_f32_to_bf16({value})"),
    }
}

/// The conversion functions a kernel's element types need (none for an all-`f32` kernel),
/// each definition starting with `qualifier` (`__device__ ` for CUDA). `f16` uses the
/// compiler's `_Float16` where it has one (GCC and Clang on x86-64 and AArch64: F16C /
/// AVX-512 conversions), PTX's `cvt` on a GPU, and exact integer code elsewhere (the CUDA
/// emulator); `bf16` is integer code everywhere (a shift to widen, round-to-nearest-even
/// to narrow), which compilers vectorize.
pub fn dtype_prelude(kernel: &Kernel, qualifier: &str) -> String {
    let used = |d: DType| kernel.params.iter().any(|p| p.dtype == d);
    let mut s = String::new();
    if used(DType::BF16) {
        let _ = write!(
            s,
            "{qualifier}static inline float td_bf16_to_f32(unsigned short x) {{\n\
             \x20   union {{ unsigned int u; float f; }} v; v.u = (unsigned int)x << 16; return v.f;\n}}\n\
             {qualifier}static inline unsigned short td_f32_to_bf16(float f) {{\n\
             \x20   union {{ float f; unsigned int u; }} v; v.f = f;\n\
             \x20   if ((v.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((v.u >> 16) | 0x40u);\n\
             \x20   return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);\n}}\n"
        );
    }
    if used(DType::F16) {
        let _ = write!(
            s,
            "#if defined(__CUDA_ARCH__)\n\
             {qualifier}static inline float td_f16_to_f32(unsigned short x) {{\n\
             \x20   float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x)); return f;\n}}\n\
             {qualifier}static inline unsigned short td_f32_to_f16(float f) {{\n\
             \x20   unsigned short x; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(x) : \"f\"(f)); return x;\n}}\n\
             #elif defined(__FLT16_MAX__) && !defined(__cplusplus)\n\
             {qualifier}static inline float td_f16_to_f32(unsigned short x) {{\n\
             \x20   union {{ unsigned short u; _Float16 h; }} v; v.u = x; return (float)v.h;\n}}\n\
             {qualifier}static inline unsigned short td_f32_to_f16(float f) {{\n\
             \x20   union {{ unsigned short u; _Float16 h; }} v; v.h = (_Float16)f; return v.u;\n}}\n\
             #else\n\
             {qualifier}static inline float td_f16_to_f32(unsigned short h) {{\n\
             \x20   unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;\n\
             \x20   if (e == 0x1fu) u = s | 0x7f800000u | (m << 13);\n\
             \x20   else if (e != 0) u = s | ((e + 112u) << 23) | (m << 13);\n\
             \x20   else if (m == 0) u = s;\n\
             \x20   else {{ e = 113u; while (!(m & 0x400u)) {{ m <<= 1; --e; }} u = s | (e << 23) | ((m & 0x3ffu) << 13); }}\n\
             \x20   union {{ unsigned int u; float f; }} v; v.u = u; return v.f;\n}}\n\
             {qualifier}static inline unsigned short td_f32_to_f16(float f) {{\n\
             \x20   union {{ float f; unsigned int u; }} v; v.f = f;\n\
             \x20   unsigned int s = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;\n\
             \x20   if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));\n\
             \x20   if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);\n\
             \x20   if (a >= 0x38800000u) {{ unsigned int r = a - 0x38000000u; return (unsigned short)(s | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13)); }}\n\
             \x20   if (a < 0x33000000u) return (unsigned short)s;\n\
             \x20   unsigned int sh = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;\n\
             \x20   unsigned int q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);\n\
             \x20   if (rem > half || (rem == half && (q & 1u))) ++q;\n\
             \x20   return (unsigned short)(s | q);\n}}\n\
             #endif\n"
        );
    }
    s
}

/// Strides of a row-major shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// `name` as a C identifier: every character other than an ASCII letter, digit or `_`
/// becomes `_`, a leading digit gets a `_` before it, an empty name is `kernel`, and at most
/// 64 characters are kept. Every user-given name printed into generated code (a kernel's
/// name, the CLI's `--name`) goes through this, so no name can close a comment or add code.
///
/// ```
/// use tensor_dsl::codegen::c_identifier;
/// assert_eq!(c_identifier("matmul"), "matmul");
/// assert_eq!(c_identifier("x */ int evil; /*"), "x____int_evil____");
/// assert_eq!(c_identifier("3mm"), "_3mm");
/// assert_eq!(c_identifier(""), "kernel");
/// ```
pub fn c_identifier(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        s.push_str("kernel");
    } else if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
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

/// Helper functions for the built-ins a kernel uses beyond those of [`builtin_prelude`]
/// (`silu`, `rsqrt`), each definition starting with `qualifier`.
pub fn used_builtins_prelude(kernel: &Kernel, qualifier: &str) -> String {
    fn uses(e: &Expr, f: Func) -> bool {
        match e {
            Expr::Lit(_) | Expr::Access(_) | Expr::Output | Expr::Temp(_) => false,
            Expr::Neg(a) => uses(a, f),
            Expr::Bin(_, a, b) => uses(a, f) || uses(b, f),
            Expr::Call(g, args) => *g == f || args.iter().any(|a| uses(a, f)),
        }
    }
    let used = |f: Func| {
        uses(&kernel.body, f)
            || kernel.epilogue.iter().any(|e| uses(e, f))
            || kernel.stages().iter().any(|s| uses(&s.body, f))
    };
    let mut s = String::new();
    for (f, body) in [
        (Func::Silu, "return x / (1.0f + expf(-x));"),
        (Func::Rsqrt, "return 1.0f / sqrtf(x);"),
    ] {
        if used(f) {
            let _ = writeln!(
                s,
                "{qualifier}static inline float td_{}(float x) {{ {body} }}",
                f.name()
            );
        }
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

    /// The coordinates of `a` at the current indices, with their ranges.
    fn coords(&self, a: &Access) -> Vec<Coord> {
        a.dims
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
            .collect()
    }

    /// The element of `a` read from global memory (never from a packed buffer).
    pub fn global(&self, a: &Access) -> String {
        let shape = self.shapes[a.tensor];
        let coords = self.coords(a);
        let conds = bound_checks(shape, &coords);
        let load = load_as_f32(
            self.kernel.params[a.tensor].dtype,
            &format!("{}[{}]", self.tensor[a.tensor], offset_expr(shape, &coords)),
        );
        if conds.is_empty() {
            load
        } else {
            format!("({} ? {load} : 0.0f)", conds.join(" && "))
        }
    }

    /// The element of `a` as stored (`t0[...]`, not widened), where no coordinate can fall
    /// outside the tensor (`None` where one can: such a read needs a guard).
    pub fn stored(&self, a: &Access) -> Option<String> {
        let shape = self.shapes[a.tensor];
        let coords = self.coords(a);
        bound_checks(shape, &coords)
            .is_empty()
            .then(|| format!("{}[{}]", self.tensor[a.tensor], offset_expr(shape, &coords)))
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
            // Intermediates of a kernel of several stages are scalars `td_t<n>`.
            Expr::Temp(t) => format!("td_t{t}"),
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
                    Func::Log => "logf",
                    Func::Abs => "fabsf",
                    Func::Pow => "powf",
                    Func::Erf => "erff",
                    Func::Silu => "td_silu",
                    Func::Rsqrt => "td_rsqrt",
                };
                format!("{name}({})", args.join(", "))
            }
        }
    }
}

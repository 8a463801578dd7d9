//! The reference interpreter: runs any kernel of the language by walking the IR point by
//! point, accumulating in `f64`. Slow and obviously right; every backend is checked
//! against it. Inputs of any element type are read exactly (as `f32`); the output is
//! rounded to its element type once, after the epilogue.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let (a, b) = ([1.0f32, 2.0, 3.0, 4.0], [1.0f32, 0.0, 0.0, 1.0]);
//! let mut c = [0.0f32; 4];
//! let shapes: [&[usize]; 3] = [&[2, 2], &[2, 2], &[2, 2]];
//! let data = [(&a).into(), (&b).into(), Default::default()];
//! tensor_dsl::reference::run(&k, &[2, 2, 2], &shapes, &data, (&mut c).into());
//! assert_eq!(c, [1.0, 2.0, 3.0, 4.0]);
//! ```

use crate::ir::{Access, BinOp, BodyKind, Expr, Func, Kernel, Reducer, Staged};
use crate::tensor::{Data, DataMut};
use std::borrow::Cow;

/// Evaluates a built-in function (shared with the C and CUDA generators' semantics).
pub fn call(f: Func, args: &[f64]) -> f64 {
    let x = args.first().copied().unwrap_or(0.0);
    match f {
        Func::Relu => x.max(0.0),
        Func::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Func::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Func::Tanh => x.tanh(),
        Func::Exp => x.exp(),
        Func::Sqrt => x.sqrt(),
        Func::Max => x.max(args.get(1).copied().unwrap_or(f64::NEG_INFINITY)),
        Func::Min => x.min(args.get(1).copied().unwrap_or(f64::INFINITY)),
        Func::Log => x.ln(),
        Func::Abs => x.abs(),
        Func::Pow => x.powf(args.get(1).copied().unwrap_or(1.0)),
        Func::Erf => erf(x),
        Func::Silu => x / (1.0 + (-x).exp()),
        Func::Rsqrt => 1.0 / x.sqrt(),
    }
}

/// The error function, to about 1e-15 (W. J. Cody's rational approximations would do too;
/// this is the series / continued-fraction pair, plenty for an f32 reference).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // Maclaurin series: erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        let x2 = a * a;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
            if n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a < 6.0 {
        // Continued fraction for erfc, evaluated bottom-up.
        let mut f = 0.0;
        for k in (1..=60).rev() {
            f = (k as f64 / 2.0) / (a + f);
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * (a + f))
    } else {
        1.0
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// Strides of a row-major shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

struct Ctx<'a> {
    shapes: &'a [&'a [usize]],
    strides: Vec<Vec<usize>>,
    data: Vec<Cow<'a, [f32]>>,
    /// The intermediates of a kernel of several stages computed so far: (dims, strides,
    /// values), each rounded to `f32` as the generated code keeps them.
    temps: Vec<(Vec<usize>, Vec<usize>, Vec<f64>)>,
}

impl Ctx<'_> {
    fn read(&self, a: &Access, values: &[i64]) -> f64 {
        let mut off = 0usize;
        for (d, map) in a.dims.iter().enumerate() {
            let c = map.eval(values);
            if c < 0 || c as usize >= self.shapes[a.tensor][d] {
                return 0.0;
            }
            off += c as usize * self.strides[a.tensor][d];
        }
        self.data[a.tensor].get(off).map_or(0.0, |&x| f64::from(x))
    }

    fn eval(&self, e: &Expr, values: &[i64], out: f64) -> f64 {
        match e {
            Expr::Lit(v) => *v,
            Expr::Access(a) => self.read(a, values),
            Expr::Output => out,
            Expr::Temp(t) => self.temps.get(*t).map_or(f64::NAN, |(dims, strides, v)| {
                let off: usize = dims
                    .iter()
                    .zip(strides)
                    .map(|(&d, &s)| values[d] as usize * s)
                    .sum();
                v.get(off).copied().unwrap_or(f64::NAN)
            }),
            Expr::Neg(a) => -self.eval(a, values, out),
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.eval(a, values, out), self.eval(b, values, out));
                match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                }
            }
            Expr::Call(f, args) => {
                let args: Vec<f64> = args.iter().map(|a| self.eval(a, values, out)).collect();
                call(*f, &args)
            }
        }
    }
}

/// Advances a multi-index (odometer order, last index fastest); `false` when it wraps.
fn next(values: &mut [i64], ids: &[usize], extents: &[usize]) -> bool {
    for &v in ids.iter().rev() {
        values[v] += 1;
        if (values[v] as usize) < extents[v] {
            return true;
        }
        values[v] = 0;
    }
    false
}

/// Runs `kernel`. `extents` come from [`crate::ir::bind`]; `shapes` and `data` are indexed
/// by parameter id (the output's data slot is ignored); `out` is the output buffer.
pub fn run(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    mut out: DataMut<'_>,
) {
    let ctx = Ctx {
        shapes,
        strides: shapes.iter().map(|s| strides(s)).collect(),
        data: data
            .iter()
            .map(|d| match d.as_f32() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(d.to_f32()),
            })
            .collect(),
        temps: Vec::new(),
    };
    if let Some(staged) = kernel.staged.as_deref() {
        return run_staged(kernel, staged, ctx, extents, out);
    }
    let spatial = kernel.spatial();
    let reduction = kernel.reduction();
    let mut values = vec![0i64; extents.len()];
    for slot in 0..out.len() {
        for &r in &reduction {
            values[r] = 0;
        }
        let mut acc = match kernel.kind {
            BodyKind::Assign => ctx.eval(&kernel.body, &values, 0.0),
            BodyKind::Sum => {
                let mut acc = 0.0;
                loop {
                    acc += ctx.eval(&kernel.body, &values, 0.0);
                    if !next(&mut values, &reduction, extents) {
                        break;
                    }
                }
                acc
            }
        };
        for e in &kernel.epilogue {
            acc = ctx.eval(e, &values, acc);
        }
        out.set(slot, acc as f32);
        next(&mut values, &spatial, extents);
    }
}

/// Whether every access of `e` is inside its tensor at `values`: a reduction's point where
/// one is not contributes the reducer's identity (padding).
fn inside(ctx: &Ctx<'_>, e: &Expr, values: &[i64]) -> bool {
    let mut ok = true;
    e.visit_accesses(&mut |a| {
        for (d, map) in a.dims.iter().enumerate() {
            let c = map.eval(values);
            ok &= c >= 0 && (c as usize) < ctx.shapes[a.tensor][d];
        }
    });
    ok
}

/// One statement at the current point of its kept indices: the reduction of `body` over
/// `over` (padded points skipped), or `body` itself.
fn statement(
    ctx: &Ctx<'_>,
    reducer: Option<Reducer>,
    over: &[usize],
    body: &Expr,
    values: &mut [i64],
    extents: &[usize],
) -> f64 {
    let Some(r) = reducer else {
        return ctx.eval(body, values, 0.0);
    };
    for &v in over {
        values[v] = 0;
    }
    let mut acc = r.identity();
    loop {
        if inside(ctx, body, values) {
            acc = r.combine(acc, ctx.eval(body, values, 0.0));
        }
        if !next(values, over, extents) {
            break;
        }
    }
    if r == Reducer::Mean {
        acc /= over.iter().map(|&v| extents[v] as f64).product::<f64>();
    }
    acc
}

/// A kernel of several stages: each intermediate over all its points, in order, then the
/// output and its epilogues.
fn run_staged(
    kernel: &Kernel,
    staged: &Staged,
    mut ctx: Ctx<'_>,
    extents: &[usize],
    mut out: DataMut<'_>,
) {
    let mut values = vec![0i64; extents.len()];
    for stage in &staged.stages {
        let shape: Vec<usize> = stage.dims.iter().map(|&d| extents[d]).collect();
        let n: usize = shape.iter().product();
        let mut v = Vec::with_capacity(n);
        for &d in &stage.dims {
            values[d] = 0;
        }
        for _ in 0..n {
            let x = statement(
                &ctx,
                stage.reducer,
                &stage.over,
                &stage.body,
                &mut values,
                extents,
            );
            v.push(f64::from(x as f32));
            next(&mut values, &stage.dims, extents);
        }
        ctx.temps.push((stage.dims.clone(), strides(&shape), v));
    }
    let spatial = kernel.spatial();
    for &d in &spatial {
        values[d] = 0;
    }
    for slot in 0..out.len() {
        let mut acc = statement(
            &ctx,
            staged.reducer,
            &staged.over,
            &kernel.body,
            &mut values,
            extents,
        );
        for e in &kernel.epilogue {
            acc = ctx.eval(e, &values, acc);
        }
        out.set(slot, acc as f32);
        next(&mut values, &spatial, extents);
    }
}

#[cfg(test)]
mod tests {
    use super::erf;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.0, -0.842_700_792_949_714_9),
        ] {
            assert!((erf(x) - want).abs() < 1e-12, "erf({x}) = {}", erf(x));
        }
    }
}

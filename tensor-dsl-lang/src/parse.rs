//! Statements (as `syn` syntax) → validated [`Kernel`], with every error spanned on the
//! user's tokens. Used by the `#[tensor_kernel]` macro and by [`parse_text`] (the CLI).

use crate::ir::{
    Access, Affine, BinOp, BodyKind, DType, Expr, Func, Index, IndexKind, Kernel, Param,
};
use proc_macro2::Span;
use quote::ToTokens;
use std::collections::HashMap;

mod staged;

/// The largest coefficient or constant (in magnitude) of an index expression: bigger ones are
/// an error, so folding `2 * (3 * p)` never overflows.
const INDEX_LIMIT: u64 = 1 << 31;

/// A tensor parameter as declared by the user.
#[derive(Clone, Debug)]
pub struct ParamDecl {
    pub name: syn::Ident,
    pub is_output: bool,
    /// The element type (`Tensor<bf16>`); text kernels start with `f32`.
    pub dtype: DType,
}

/// Collects several errors before giving up (as serde_derive's `Ctxt` does).
#[derive(Default)]
struct Errors(Vec<syn::Error>);

impl Errors {
    fn push(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.0.push(syn::Error::new_spanned(tokens, msg));
    }
    fn finish(self) -> syn::Result<()> {
        let mut it = self.0.into_iter();
        match it.next() {
            None => Ok(()),
            Some(mut first) => {
                for e in it {
                    first.combine(e);
                }
                Err(first)
            }
        }
    }
}

/// Where we are: the main statement may introduce reduction indices, epilogues may not.
#[derive(Clone, Copy, PartialEq)]
enum Stage {
    MainSum,
    MainAssign,
    Epilogue,
    /// A statement of a kernel of several stages (see `staged`): new indices are reduced.
    Staged,
}

struct Parser<'a> {
    params: &'a [ParamDecl],
    output: usize,
    /// Rank of each parameter, from its first use, with that use's tokens for messages.
    ranks: Vec<Option<usize>>,
    used: Vec<bool>,
    indices: Vec<Index>,
    by_name: HashMap<String, usize>,
    /// Whether the index appears as a plain variable in some access (so its extent is known).
    plain: Vec<bool>,
    /// First token of each index, for messages.
    first_use: Vec<proc_macro2::TokenStream>,
    /// The output's index names from the main statement.
    lhs: Vec<String>,
    errors: Errors,
    /// Every index use of the statement being parsed, with its tokens (for the checks of
    /// kernels of several stages).
    uses: Vec<(usize, proc_macro2::TokenStream)>,
    /// The intermediates of a kernel of several stages.
    temps: staged::Temps,
}

/// Parses and validates a kernel body.
///
/// `params` are the tensor parameters in declaration order (exactly one output);
/// `stmts` the body's statements; `body_span` is used when the body is empty.
pub fn parse_kernel(
    name: &str,
    params: &[ParamDecl],
    stmts: &[syn::Stmt],
    body_span: Span,
) -> syn::Result<Kernel> {
    let outputs: Vec<usize> = (0..params.len()).filter(|&p| params[p].is_output).collect();
    let output = match outputs.as_slice() {
        [o] => *o,
        [] => {
            return Err(syn::Error::new(
                body_span,
                "a kernel needs exactly one output parameter of type `&mut Tensor<f32>`",
            ))
        }
        [_, second, ..] => {
            return Err(syn::Error::new_spanned(
                &params[*second].name,
                "a kernel has exactly one output; make this parameter `&Tensor<f32>`",
            ))
        }
    };
    let mut p = Parser {
        params,
        output,
        ranks: vec![None; params.len()],
        used: vec![false; params.len()],
        indices: Vec::new(),
        by_name: HashMap::new(),
        plain: Vec::new(),
        first_use: Vec::new(),
        lhs: Vec::new(),
        errors: Errors::default(),
        uses: Vec::new(),
        temps: staged::Temps::default(),
    };
    for (i, a) in params.iter().enumerate() {
        if params[..i].iter().any(|b| b.name == a.name) {
            p.errors.push(&a.name, "duplicate parameter name");
        }
    }

    if staged::is_staged(params, stmts) {
        return staged::parse(p, name, stmts, body_span);
    }
    let mut stmts = stmts.iter();
    let Some(first) = stmts.next() else {
        return Err(syn::Error::new(
            body_span,
            "empty kernel: write a statement such as `c[[i, j]] += a[[i, k]] * b[[k, j]];`",
        ));
    };
    let main = p.main_statement(first);
    // Without a valid first statement, the epilogues' checks would only repeat its errors.
    let main_ok = main.is_some();
    let stmts = stmts.filter(|_| main_ok);
    let (kind, body) = main.unwrap_or((BodyKind::Assign, Expr::Lit(0.0)));
    let mut epilogue = Vec::new();
    for s in stmts {
        if let Some(e) = p.epilogue_statement(s) {
            epilogue.push(e);
        }
    }
    let clean = p.errors.0.is_empty();
    for (i, a) in params.iter().enumerate() {
        if clean && !p.used[i] && !a.is_output {
            p.errors.push(
                &a.name,
                format!(
                    "parameter `{}` is never read by the kernel; remove it or use it",
                    a.name
                ),
            );
        }
    }
    p.errors.finish()?;

    let rank = |i: usize| p.ranks[i].unwrap_or(0);
    Ok(Kernel {
        name: name.to_string(),
        params: params
            .iter()
            .enumerate()
            .map(|(i, d)| Param {
                name: d.name.to_string(),
                dtype: d.dtype,
                rank: rank(i),
                is_output: d.is_output,
            })
            .collect(),
        output,
        indices: p.indices,
        kind,
        body,
        epilogue,
        staged: None,
    })
}

/// Splits `tensor[[e0, e1, ...]]` into the tensor's identifier and the index expressions.
fn split_access(e: &syn::Expr) -> Result<(&syn::Ident, Vec<&syn::Expr>), syn::Error> {
    let syn::Expr::Index(ix) = e else {
        return Err(syn::Error::new_spanned(
            e,
            "expected a tensor access like `a[[i, j]]`",
        ));
    };
    let base = match &*ix.expr {
        syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        _ => None,
    };
    let Some(base) = base else {
        return Err(syn::Error::new_spanned(
            &ix.expr,
            "expected a tensor parameter's name before `[[...]]`",
        ));
    };
    match &*ix.index {
        syn::Expr::Array(arr) => Ok((base, arr.elems.iter().collect())),
        other => Err(syn::Error::new_spanned(
            other,
            format!(
                "index a tensor with double brackets: `{base}[[{}]]`",
                other.to_token_stream()
            ),
        )),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn strip_group(mut e: &syn::Expr) -> &syn::Expr {
    loop {
        match e {
            syn::Expr::Paren(p) => e = &p.expr,
            syn::Expr::Group(g) => e = &g.expr,
            _ => return e,
        }
    }
}

impl<'a> Parser<'a> {
    fn param(&self, ident: &syn::Ident) -> Option<usize> {
        self.params.iter().position(|p| p.name == *ident)
    }

    fn check_rank(&mut self, tensor: usize, rank: usize, tokens: &dyn ToTokens) {
        match self.ranks[tensor] {
            None => self.ranks[tensor] = Some(rank),
            Some(r) if r != rank => self.errors.push(
                tokens.to_token_stream(),
                format!(
                    "`{}` is used with {} here but with {} elsewhere; a tensor has one rank",
                    self.params[tensor].name,
                    plural(rank, "index", "indices"),
                    plural(r, "index", "indices"),
                ),
            ),
            Some(_) => {}
        }
    }

    /// Splits an assignment statement into (op, lhs, rhs); `op` is `=`, `+=`, ...
    fn assignment<'s>(
        &mut self,
        s: &'s syn::Stmt,
    ) -> Option<(
        String,
        &'s syn::Expr,
        &'s syn::Expr,
        proc_macro2::TokenStream,
    )> {
        let e = match s {
            syn::Stmt::Expr(e, _) => e,
            syn::Stmt::Local(l) => {
                self.errors.push(
                    l,
                    "`let` is not supported in a kernel: write the expression inline, or as an epilogue statement on the output",
                );
                return None;
            }
            other => {
                self.errors.push(
                    other,
                    "expected an assignment like `c[[i, j]] += a[[i, k]] * b[[k, j]];`",
                );
                return None;
            }
        };
        match e {
            syn::Expr::Assign(a) => Some((
                "=".into(),
                &*a.left,
                &*a.right,
                a.eq_token.to_token_stream(),
            )),
            syn::Expr::Binary(b)
                if matches!(
                    b.op,
                    syn::BinOp::AddAssign(_)
                        | syn::BinOp::SubAssign(_)
                        | syn::BinOp::MulAssign(_)
                        | syn::BinOp::DivAssign(_)
                ) =>
            {
                Some((
                    b.op.to_token_stream().to_string().replace(' ', ""),
                    &*b.left,
                    &*b.right,
                    b.op.to_token_stream(),
                ))
            }
            other => {
                self.errors.push(
                    other,
                    "expected an assignment like `c[[i, j]] += a[[i, k]] * b[[k, j]];`",
                );
                None
            }
        }
    }

    /// Checks the left-hand side is the output indexed by distinct plain variables; returns
    /// the variable names with their tokens.
    fn lhs(&mut self, lhs: &syn::Expr) -> Option<Vec<(String, proc_macro2::TokenStream)>> {
        let (base, elems) = match split_access(lhs) {
            Ok(x) => x,
            Err(e) => {
                self.errors.0.push(e);
                return None;
            }
        };
        match self.param(base) {
            None => {
                self.errors
                    .push(base, format!("`{base}` is not a parameter of this kernel"));
                return None;
            }
            Some(t) if t != self.output => {
                self.errors.push(
                    base,
                    format!(
                        "`{base}` is an input (`&Tensor`); only the output `{}` can be assigned",
                        self.params[self.output].name
                    ),
                );
                return None;
            }
            Some(_) => {}
        }
        let mut names: Vec<(String, proc_macro2::TokenStream)> = Vec::new();
        let mut ok = true;
        for e in elems {
            let ident = match strip_group(e) {
                syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
                _ => None,
            };
            match ident {
                Some(id) => {
                    let n = id.to_string();
                    if self.param(id).is_some() {
                        self.errors
                            .push(id, format!("`{n}` is a tensor, not an index variable"));
                        ok = false;
                    } else if names.iter().any(|(m, _)| *m == n) {
                        self.errors.push(
                            id,
                            format!("index `{n}` appears twice on the left; each output dimension needs its own index"),
                        );
                        ok = false;
                    } else {
                        names.push((n, id.to_token_stream()));
                    }
                }
                None => {
                    self.errors.push(
                        e,
                        "the output must be indexed by plain index variables, like `c[[i, j]]`",
                    );
                    ok = false;
                }
            }
        }
        let rank = names.len();
        self.check_rank(self.output, rank, &lhs);
        ok.then_some(names)
    }

    fn main_statement(&mut self, s: &syn::Stmt) -> Option<(BodyKind, Expr)> {
        let (op, lhs, rhs, op_tokens) = self.assignment(s)?;
        let kind = match op.as_str() {
            "+=" => BodyKind::Sum,
            "=" => BodyKind::Assign,
            _ => {
                self.errors.push(
                    op_tokens,
                    format!("`{op}` is not supported; the first statement is a contraction `+=` or an elementwise `=`"),
                );
                return None;
            }
        };
        let names = self.lhs(lhs)?;
        for (n, tokens) in &names {
            self.by_name.insert(n.clone(), self.indices.len());
            self.indices.push(Index {
                name: n.clone(),
                kind: IndexKind::Spatial,
            });
            self.plain.push(true);
            self.first_use.push(tokens.clone());
        }
        self.lhs = names.iter().map(|(n, _)| n.clone()).collect();
        let n_spatial = self.indices.len();
        let stage = match kind {
            BodyKind::Sum => Stage::MainSum,
            BodyKind::Assign => Stage::MainAssign,
        };
        let mut seen = vec![false; n_spatial];
        let body = self.value(rhs, stage, &mut seen);
        for (i, (n, tokens)) in names.iter().enumerate() {
            if !seen[i] && body.is_some() {
                self.errors.push(
                    tokens,
                    format!("index `{n}` on the left is not used on the right, so nothing defines the output along it"),
                );
            }
        }
        for i in n_spatial..self.indices.len() {
            if !self.plain[i] {
                self.errors.push(
                    self.first_use[i].clone(),
                    format!(
                        "the extent of index `{}` is unknown: it appears only inside affine expressions; use it plainly in some access (e.g. `w[[{}]]`)",
                        self.indices[i].name, self.indices[i].name
                    ),
                );
            }
        }
        Some((kind, body?))
    }

    fn epilogue_statement(&mut self, s: &syn::Stmt) -> Option<Expr> {
        let (op, lhs, rhs, op_tokens) = self.assignment(s)?;
        if op != "=" {
            let out = &self.params[self.output].name;
            let bin = &op[..1];
            self.errors.push(
                op_tokens,
                format!("`{op}` is only allowed in the first statement; in an epilogue write `{out}[[..]] = {out}[[..]] {bin} ...`"),
            );
            return None;
        }
        let names = self.lhs(lhs)?;
        let names: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
        if names != self.lhs {
            self.errors.push(
                lhs,
                format!(
                    "an epilogue updates the output elementwise: write `{}[[{}]]` as in the first statement",
                    self.params[self.output].name,
                    self.lhs.join(", ")
                ),
            );
            return None;
        }
        let mut seen = vec![false; self.indices.len()];
        self.value(rhs, Stage::Epilogue, &mut seen)
    }

    /// Parses a value expression. `seen[i]` is set for every spatial index `i` used.
    fn value(&mut self, e: &syn::Expr, stage: Stage, seen: &mut Vec<bool>) -> Option<Expr> {
        match e {
            syn::Expr::Paren(p) => self.value(&p.expr, stage, seen),
            syn::Expr::Group(g) => self.value(&g.expr, stage, seen),
            syn::Expr::Lit(l) => {
                let v = match &l.lit {
                    syn::Lit::Float(f) => f.base10_parse::<f64>().ok(),
                    syn::Lit::Int(i) => i.base10_parse::<f64>().ok(),
                    _ => None,
                };
                match v {
                    Some(v) if v.is_finite() => Some(Expr::Lit(v)),
                    _ => {
                        self.errors.push(l, "expected a finite number literal");
                        None
                    }
                }
            }
            syn::Expr::Unary(u) => match u.op {
                syn::UnOp::Neg(_) => Some(Expr::Neg(Box::new(self.value(&u.expr, stage, seen)?))),
                _ => {
                    self.errors.push(u, "only unary `-` is supported");
                    None
                }
            },
            syn::Expr::Binary(b) => {
                let op = match b.op {
                    syn::BinOp::Add(_) => Some(BinOp::Add),
                    syn::BinOp::Sub(_) => Some(BinOp::Sub),
                    syn::BinOp::Mul(_) => Some(BinOp::Mul),
                    syn::BinOp::Div(_) => Some(BinOp::Div),
                    _ => None,
                };
                let l = self.value(&b.left, stage, seen);
                let r = self.value(&b.right, stage, seen);
                let Some(op) = op else {
                    self.errors.push(
                        b.op,
                        format!(
                            "operator `{}` is not supported; use + - * /",
                            b.op.to_token_stream()
                        ),
                    );
                    return None;
                };
                Some(Expr::Bin(op, Box::new(l?), Box::new(r?)))
            }
            syn::Expr::Call(c) => {
                let name = match &*c.func {
                    syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
                    _ => None,
                };
                // `max(x[[i, j]])` inside a larger expression: a reduction is a statement of
                // its own. Said before the arguments are read, whose index errors would
                // suggest something else.
                if let Some(n) =
                    name.filter(|n| crate::ir::Reducer::from_name(&n.to_string()).is_some())
                {
                    if c.args.len() == 1 {
                        self.errors.push(
                            c,
                            format!(
                                "`{n}(...)` with one argument is a reduction and must be the whole right side of a statement: name it, `m[[i]] = {n}(x[[i, j]]);`, and use `m[[i]]` here"
                            ),
                        );
                        return None;
                    }
                }
                let args: Vec<Option<Expr>> =
                    c.args.iter().map(|a| self.value(a, stage, seen)).collect();
                let Some(name) = name else {
                    self.errors
                        .push(&c.func, "expected a built-in function name");
                    return None;
                };
                let Some(f) = Func::from_name(&name.to_string()) else {
                    let all: Vec<&str> = Func::ALL.iter().map(|f| f.name()).collect();
                    self.errors.push(
                        name,
                        format!(
                            "unknown function `{name}`; the built-ins are {}",
                            all.join(", ")
                        ),
                    );
                    return None;
                };
                if args.len() != f.arity() {
                    self.errors.push(
                        c,
                        format!(
                            "`{}` takes {} argument{}, got {}",
                            f.name(),
                            f.arity(),
                            if f.arity() == 1 { "" } else { "s" },
                            args.len()
                        ),
                    );
                    return None;
                }
                let args: Option<Vec<Expr>> = args.into_iter().collect();
                Some(Expr::Call(f, args?))
            }
            syn::Expr::MethodCall(m) => {
                self.errors.push(
                    m,
                    format!(
                        "method calls are not supported; call the built-in as a function, e.g. `{}(x, ...)`",
                        m.method
                    ),
                );
                None
            }
            syn::Expr::Index(_) => self.access(e, stage, seen),
            syn::Expr::Path(p) => {
                let msg = match p.path.get_ident() {
                    Some(id) if self.param(id).is_some() => {
                        format!("`{id}` is a tensor; read an element with `{id}[[...]]`")
                    }
                    Some(id) => format!(
                        "`{id}` is not a tensor parameter; index variables can only be used inside `[[...]]`"
                    ),
                    None => "expected a tensor access, a number or a built-in call".into(),
                };
                self.errors.push(p, msg);
                None
            }
            other => {
                self.errors.push(
                    other,
                    "unsupported expression: use tensor accesses `a[[i]]`, numbers, + - * /, and built-in calls",
                );
                None
            }
        }
    }

    fn access(&mut self, e: &syn::Expr, stage: Stage, seen: &mut Vec<bool>) -> Option<Expr> {
        let (base, elems) = match split_access(e) {
            Ok(x) => x,
            Err(err) => {
                self.errors.0.push(err);
                return None;
            }
        };
        if self.param(base).is_none() && self.temps.knows(base) {
            return self.temp_read(base, &elems, e);
        }
        let Some(tensor) = self.param(base) else {
            self.errors
                .push(base, format!("`{base}` is not a parameter of this kernel"));
            return None;
        };
        self.check_rank(tensor, elems.len(), &e);
        if tensor == self.output {
            if stage == Stage::Staged {
                self.errors.push(
                    e,
                    format!(
                        "the output `{base}` cannot be read by its own statement or an intermediate; read intermediates (`m[[i]]`) and inputs, or the output in a later statement"
                    ),
                );
                return None;
            }
            if stage != Stage::Epilogue {
                self.errors.push(
                    e,
                    format!(
                        "the output `{base}` cannot be read in the first statement: it is overwritten (einsum semantics); read it in a later statement"
                    ),
                );
                return None;
            }
            let plain: Vec<String> = elems
                .iter()
                .map(|x| strip_group(x).to_token_stream().to_string())
                .collect();
            if plain != self.lhs {
                self.errors.push(
                    e,
                    format!(
                        "an epilogue reads the output elementwise: write `{base}[[{}]]`",
                        self.lhs.join(", ")
                    ),
                );
                return None;
            }
            for (i, s) in seen.iter_mut().enumerate() {
                if i < self.lhs.len() {
                    *s = true;
                }
            }
            return Some(Expr::Output);
        }
        self.used[tensor] = true;
        let mut dims = Vec::new();
        let mut ok = true;
        for x in elems {
            match self.affine(x, stage, seen) {
                Some(a) => {
                    if let Some(v) = a.as_var() {
                        self.plain[v] = true;
                    }
                    dims.push(a);
                }
                None => ok = false,
            }
        }
        ok.then_some(Expr::Access(Access { tensor, dims }))
    }

    /// `a` if its coefficients and offset are within [`INDEX_LIMIT`], else an error at `at`.
    fn in_range(&mut self, at: &dyn ToTokens, a: Affine) -> Option<Affine> {
        let fits = |v: i64| v.unsigned_abs() <= INDEX_LIMIT;
        if fits(a.offset) && a.terms.iter().all(|&(_, c)| fits(c)) {
            Some(a)
        } else {
            self.errors.push(
                at,
                "index expression out of range: its coefficients and constant must stay within ±2147483648",
            );
            None
        }
    }

    /// Parses an affine index expression.
    fn affine(&mut self, e: &syn::Expr, stage: Stage, seen: &mut Vec<bool>) -> Option<Affine> {
        match e {
            syn::Expr::Paren(p) => self.affine(&p.expr, stage, seen),
            syn::Expr::Group(g) => self.affine(&g.expr, stage, seen),
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i),
                ..
            }) => match i.base10_parse::<i64>() {
                Ok(v) => self.in_range(i, Affine::constant(v)),
                Err(_) => {
                    self.errors.push(i, "integer literal out of range");
                    None
                }
            },
            syn::Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
                let id = p.path.get_ident()?;
                let v = self.index_var(id, stage)?;
                self.uses.push((v, id.to_token_stream()));
                if v < seen.len() {
                    seen[v] = true;
                }
                Some(Affine::var(v))
            }
            syn::Expr::Unary(syn::ExprUnary {
                op: syn::UnOp::Neg(_),
                expr,
                ..
            }) => Some(self.affine(expr, stage, seen)?.scale(-1)),
            syn::Expr::Binary(b) => {
                let l = self.affine(&b.left, stage, seen);
                let r = self.affine(&b.right, stage, seen);
                let (l, r) = (l?, r?);
                // Operands are within `INDEX_LIMIT` (2^31), so these cannot overflow i64.
                match b.op {
                    syn::BinOp::Add(_) => self.in_range(e, l.add(&r)),
                    syn::BinOp::Sub(_) => self.in_range(e, l.add(&r.scale(-1))),
                    syn::BinOp::Mul(_) if l.terms.is_empty() => self.in_range(e, r.scale(l.offset)),
                    syn::BinOp::Mul(_) if r.terms.is_empty() => self.in_range(e, l.scale(r.offset)),
                    syn::BinOp::Mul(_) => {
                        self.errors.push(
                            e,
                            "index expressions must be affine: a product of two index variables is not allowed",
                        );
                        None
                    }
                    _ => {
                        self.errors.push(
                            e,
                            format!(
                                "index expressions must be affine (+, -, and * by an integer literal); `{}` is not supported",
                                b.op.to_token_stream()
                            ),
                        );
                        None
                    }
                }
            }
            other => {
                self.errors.push(
                    other,
                    "index expressions must be affine in index variables with integer literals, like `2 * p + r - 1`",
                );
                None
            }
        }
    }

    fn index_var(&mut self, id: &syn::Ident, stage: Stage) -> Option<usize> {
        let n = id.to_string();
        if self.param(id).is_some() {
            self.errors
                .push(id, format!("`{n}` is a tensor, not an index variable"));
            return None;
        }
        if let Some(&v) = self.by_name.get(&n) {
            if stage == Stage::Epilogue && self.indices[v].kind == IndexKind::Reduction {
                self.errors.push(
                    id,
                    format!("`{n}` is summed over in the first statement; an epilogue can only use the output's indices ({})", self.lhs.join(", ")),
                );
                return None;
            }
            return Some(v);
        }
        match stage {
            Stage::MainSum | Stage::Staged => {
                let v = self.indices.len();
                self.by_name.insert(n.clone(), v);
                self.indices.push(Index {
                    name: n,
                    kind: IndexKind::Reduction,
                });
                self.plain.push(false);
                self.first_use.push(id.to_token_stream());
                Some(v)
            }
            Stage::MainAssign => {
                self.errors.push(
                    id,
                    format!("index `{n}` is not on the left of `=`; use `+=` to sum over it, or reduce over it with a one-argument `max(..)`, `min(..)`, `sum(..)`, `prod(..)` or `mean(..)` as the whole right side (`max(a, b)` of two arguments is elementwise)"),
                );
                None
            }
            Stage::Epilogue => {
                self.errors.push(
                    id,
                    format!(
                        "index `{n}` is not an output index; an epilogue can only use {}",
                        self.lhs.join(", ")
                    ),
                );
                None
            }
        }
    }
}

/// Parses kernel statements written as text, in the same syntax as the macro body
/// (statements separated by `;`).
///
/// `params` lists the tensor parameters in order as `(name, is_output)`; when `None`, the
/// output is the tensor on the left of the first statement and the inputs are the other
/// tensors in order of first appearance.
///
/// ```
/// let k = tensor_dsl_lang::parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
/// assert_eq!(k.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
/// ```
pub fn parse_text(
    name: &str,
    src: &str,
    params: Option<&[(String, bool)]>,
) -> Result<Kernel, String> {
    let block: syn::Block =
        syn::parse_str(&format!("{{ {src} }}")).map_err(|e| format!("syntax error: {e}"))?;
    let decls: Vec<ParamDecl> = match params {
        Some(ps) => ps
            .iter()
            .map(|(n, o)| {
                syn::parse_str::<syn::Ident>(n)
                    .map(|name| ParamDecl {
                        name,
                        is_output: *o,
                        dtype: DType::F32,
                    })
                    .map_err(|_| format!("`{n}` is not a valid tensor name"))
            })
            .collect::<Result<_, _>>()?,
        None => infer_params(&block.stmts),
    };
    parse_kernel(name, &decls, &block.stmts, block.brace_token.span.join()).map_err(|e| {
        e.into_iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// Tensor names in order of first appearance; the first statement's left side is the output.
fn infer_params(stmts: &[syn::Stmt]) -> Vec<ParamDecl> {
    fn walk(e: &syn::Expr, out: &mut Vec<syn::Ident>) {
        match e {
            syn::Expr::Index(ix) => {
                if let syn::Expr::Path(p) = &*ix.expr {
                    if let Some(id) = p.path.get_ident() {
                        if !out.contains(id) {
                            out.push(id.clone());
                        }
                    }
                }
            }
            syn::Expr::Paren(p) => walk(&p.expr, out),
            syn::Expr::Group(g) => walk(&g.expr, out),
            syn::Expr::Unary(u) => walk(&u.expr, out),
            syn::Expr::Binary(b) => {
                walk(&b.left, out);
                walk(&b.right, out);
            }
            syn::Expr::Assign(a) => {
                walk(&a.left, out);
                walk(&a.right, out);
            }
            syn::Expr::Call(c) => c.args.iter().for_each(|a| walk(a, out)),
            _ => {}
        }
    }
    let mut names = Vec::new();
    for s in stmts {
        if let syn::Stmt::Expr(e, _) = s {
            walk(e, &mut names);
        }
    }
    // With intermediates (names assigned before the output's statement), the output is
    // the tensor on the left of the last statement and intermediates are not parameters.
    let assigned: Vec<syn::Ident> = stmts
        .iter()
        .filter_map(|s| match s {
            syn::Stmt::Expr(syn::Expr::Assign(a), _) => split_access(&a.left).ok(),
            syn::Stmt::Expr(syn::Expr::Binary(b), _) => split_access(&b.left).ok(),
            _ => None,
        })
        .map(|(b, _)| b.clone())
        .collect();
    if let Some(last) = assigned.last().filter(|l| assigned.iter().any(|a| a != *l)) {
        names.retain(|n| !assigned.contains(n) || n == last);
        if let Some(pos) = names.iter().position(|n| n == last) {
            let out = names.remove(pos);
            names.insert(0, out);
        }
    }
    let output = names.first().cloned();
    let mut decls: Vec<ParamDecl> = names
        .into_iter()
        .skip(1)
        .map(|name| ParamDecl {
            name,
            is_output: false,
            dtype: DType::F32,
        })
        .collect();
    if let Some(name) = output {
        decls.push(ParamDecl {
            name,
            is_output: true,
            dtype: DType::F32,
        });
    }
    decls
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<Kernel, String> {
        parse_text("k", src, None)
    }

    #[test]
    fn matmul_indices_and_params() {
        let k = parse("c[[i, j]] += a[[i, k]] * b[[k, j]]").unwrap();
        let names: Vec<_> = k.indices.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["i", "j", "k"]);
        assert_eq!(k.spatial(), [0, 1]);
        assert_eq!(k.reduction(), [2]);
        assert_eq!(k.output, 2);
        assert_eq!(k.kind, BodyKind::Sum);
    }

    #[test]
    fn conv_affine_and_epilogue() {
        let k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]];
             y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);",
            Some(&[
                ("x".into(), false),
                ("w".into(), false),
                ("bias".into(), false),
                ("y".into(), true),
            ]),
        )
        .unwrap();
        let Expr::Bin(BinOp::Mul, x, _) = &k.body else {
            panic!("{:?}", k.body)
        };
        let Expr::Access(x) = &**x else { panic!() };
        // p is index 2, r is index 5 (n f p q | c r s)
        assert_eq!(
            x.dims[2],
            Affine {
                terms: vec![(2, 2), (5, 1)],
                offset: -1
            }
        );
        assert_eq!(k.epilogue.len(), 1);
    }

    #[test]
    fn fingerprint_ignores_names_but_not_meaning() {
        let a = parse("c[[i, j]] += a[[i, k]] * b[[k, j]]").unwrap();
        let b = parse("z[[x, y]] += p[[x, w]] * q[[w, y]]").unwrap();
        let t = parse("c[[i, j]] += a[[k, i]] * b[[k, j]]").unwrap();
        let e = parse("c[[i, j]] += a[[i, k]] * b[[k, j]]; c[[i, j]] = relu(c[[i, j]])").unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), t.fingerprint());
        assert_ne!(a.fingerprint(), e.fingerprint());
        // Pinned: a change here breaks every user's cache, so it must be deliberate.
        assert_eq!(a.fingerprint(), fingerprint_of_canonical_matmul());
    }

    /// The fingerprint is memoized by address: a kernel changed in place (same address)
    /// must not get its old fingerprint back.
    #[test]
    fn fingerprint_memo_follows_changes_in_place() {
        let mut k = parse("c[[i, j]] += a[[i, k]] * b[[k, j]]").unwrap();
        let before = k.fingerprint();
        assert_eq!(k.fingerprint(), before);
        let t = parse("c[[i, j]] += a[[k, i]] * b[[k, j]]").unwrap();
        k.body = t.body.clone();
        assert_eq!(k.fingerprint(), t.fingerprint());
        assert_ne!(k.fingerprint(), before);
    }

    fn fingerprint_of_canonical_matmul() -> String {
        format!(
            "{:016x}",
            crate::ir::fnv1a64(
                b"tensor-dsl-ir/1\nparam t0 f32 rank=2\nparam t1 f32 rank=2\nparam t2 f32 rank=2 out\nsum 1 t2[[s0, s1]] += (t0[[s0, r0]] * t1[[r0, s1]])\n"
            )
        )
    }

    #[test]
    fn errors_are_reported() {
        let cases = [
            ("c[[i, j]] += a[[i, k]] * a[[j]]", "with 1 index here"),
            ("c[[i, j]] += a[[i, k * j]]", "affine"),
            ("c[[i, j]] += foo(a[[i, j]])", "unknown function"),
            ("c[[i, j]] = a[[i, k]]", "use `+=`"),
            ("c[[i, z]] += a[[i, k]]", "not used on the right"),
            ("c[[i]] += a[[i + k]]", "extent of index `k` is unknown"),
            ("c[[i]] += a[[i]] * c[[i]]", "cannot be read"),
            (
                "c[[i]] += a[[i]]; c[[i]] += a[[i]]",
                "only allowed in the first",
            ),
            (
                "c[[i]] += a[[i, k]]; c[[i]] = c[[i]] * a[[i, k]]",
                "summed over",
            ),
        ];
        for (src, want) in cases {
            let err = parse(src).unwrap_err();
            assert!(err.contains(want), "{src}: {err}");
        }
    }

    #[test]
    fn diagonal_scalar_and_many_inputs() {
        let k = parse("t[[]] += a[[i, i]]").unwrap();
        assert_eq!(k.params[k.output].rank, 0);
        let k = parse("o[[i]] += a[[i, j]] * b[[j, l]] * c[[l]] * d[[i]]").unwrap();
        assert_eq!(k.inputs().len(), 4);
        assert_eq!(k.reduction().len(), 2);
    }
}

//! Kernels of several stages: named intermediates, reductions written as functions
//! (`sum`, `max`, `min`, `prod`, `mean`) and index ranges.
//!
//! ```text
//! let r = 0..3;                          // an index range (a window no shape gives)
//! m[[i]] = max(x[[i, j]]);               // an intermediate: `m` is not a parameter
//! s[[i]] = sum(exp(x[[i, j]] - m[[i]])); // reads inputs and earlier intermediates
//! y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];   // the output's statement
//! y[[i, j]] = relu(y[[i, j]]);           // epilogues, as in one-statement kernels
//! ```
//!
//! A reduction `t[[..]] = f(expr)` reduces over the indices of `expr` that are not on its
//! left; an elementwise statement may use only the indices on its left. An intermediate is
//! read with the indices it was defined with.
//!
//! An elementwise intermediate that does not keep the indices the reductions keep (softmax
//! written with `e[[i, j]] = exp(x[[i, j]] - m[[i]]);`) is written into the statements that
//! read it ([`inline_elementwise`]): its value is computed where it is read, which is what it
//! means, and the kernel keeps the row form every backend runs.

use super::{split_access, strip_group, Parser, Stage};
use crate::ir::{
    BodyKind, Expr, Index, IndexKind, Kernel, Param, Reducer, Stage as IrStage, Staged,
};
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;

/// One intermediate, as parsed so far.
struct Temp {
    name: String,
    /// Index ids it keeps, with their names (to check reads).
    dims: Vec<usize>,
    defined: bool,
    used: bool,
    tokens: TokenStream,
}

/// The intermediates of a kernel: every name assigned that is not a parameter.
#[derive(Default)]
pub(super) struct Temps {
    list: Vec<Temp>,
    /// The intermediate whose statement is being parsed.
    current: Option<usize>,
    /// Index ids used by the statements parsed so far.
    seen: Vec<usize>,
}

impl Temps {
    pub(super) fn knows(&self, name: &syn::Ident) -> bool {
        self.list.iter().any(|t| *name == t.name)
    }
}

/// `sum(e)`, `max(e)`, ... with one argument: the reducer and its argument.
fn reducer_call(e: &syn::Expr) -> Option<(Reducer, &syn::Expr)> {
    let syn::Expr::Call(c) = strip_group(e) else {
        return None;
    };
    let syn::Expr::Path(p) = &*c.func else {
        return None;
    };
    let r = Reducer::from_name(&p.path.get_ident()?.to_string())?;
    match c.args.len() {
        1 => c.args.first().map(|a| (r, a)),
        _ => None,
    }
}

fn lhs_base(e: &syn::Expr) -> Option<&syn::Ident> {
    split_access(e).ok().map(|(b, _)| b)
}

/// Whether the body uses anything of the staged form: a `let`, an intermediate (a name
/// assigned that is not a parameter) or a reduction written as a function.
pub(super) fn is_staged(params: &[super::ParamDecl], stmts: &[syn::Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        syn::Stmt::Local(_) => true,
        syn::Stmt::Expr(syn::Expr::Assign(a), _) => {
            lhs_base(&a.left).is_some_and(|b| !params.iter().any(|p| p.name == *b))
                || reducer_call(&a.right).is_some()
        }
        _ => false,
    })
}

/// `let r = 0..3;`: the index name and its extent.
fn range(l: &syn::Local) -> Result<(syn::Ident, usize), syn::Error> {
    let msg = "`let` in a kernel gives an index its range, like `let r = 0..3;` (a window \
               size no tensor's shape says); intermediates are assigned without `let`: \
               `m[[i]] = max(x[[i, j]]);`";
    let name = match &l.pat {
        syn::Pat::Ident(p)
            if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() =>
        {
            p.ident.clone()
        }
        _ => return Err(syn::Error::new_spanned(l, msg)),
    };
    let Some(init) = &l.init else {
        return Err(syn::Error::new_spanned(l, msg));
    };
    if init.diverge.is_some() {
        return Err(syn::Error::new_spanned(l, msg));
    }
    let syn::Expr::Range(r) = strip_group(&init.expr) else {
        return Err(syn::Error::new_spanned(&init.expr, msg));
    };
    let int = |e: &Option<Box<syn::Expr>>| match e.as_deref().map(strip_group) {
        Some(syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        })) => i.base10_parse::<usize>().ok(),
        _ => None,
    };
    match (int(&r.start), &r.limits, int(&r.end)) {
        (Some(0), syn::RangeLimits::HalfOpen(_), Some(n)) if n > 0 => Ok((name, n)),
        _ => Err(syn::Error::new_spanned(
            r,
            "an index range starts at 0 and has a positive integer end: `0..3` (0, 1, 2)",
        )),
    }
}

/// Parses a kernel of several stages; `p` has checked the parameters.
pub(super) fn parse(
    mut p: Parser<'_>,
    name: &str,
    stmts: &[syn::Stmt],
    body_span: Span,
) -> syn::Result<Kernel> {
    let out_name = p.params[p.output].name.to_string();
    // The output's statement: the first assigning the output. Its indices are the spatial
    // ones and come first.
    let out_stmt = stmts.iter().position(|s| match s {
        syn::Stmt::Expr(syn::Expr::Assign(a), _) => {
            lhs_base(&a.left).is_some_and(|b| *b == out_name)
        }
        syn::Stmt::Expr(syn::Expr::Binary(b), _) => {
            lhs_base(&b.left).is_some_and(|b| *b == out_name)
        }
        _ => false,
    });
    let Some(out_stmt) = out_stmt else {
        p.errors.0.push(syn::Error::new(
            body_span,
            format!("no statement writes the output `{out_name}`: end with its statement, e.g. `{out_name}[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];`"),
        ));
        p.errors.finish()?;
        return Err(syn::Error::new(body_span, "no output statement"));
    };
    let (out_lhs, out_rhs, out_op) = match &stmts[out_stmt] {
        syn::Stmt::Expr(syn::Expr::Assign(a), _) => (&*a.left, &*a.right, None),
        syn::Stmt::Expr(syn::Expr::Binary(b), _) => (&*b.left, &*b.right, Some(b.op)),
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "expected the output's statement",
            ))
        }
    };
    let names = p.lhs(out_lhs).unwrap_or_default();
    for (n, tokens) in &names {
        p.by_name.insert(n.clone(), p.indices.len());
        p.indices.push(Index {
            name: n.clone(),
            kind: IndexKind::Spatial,
        });
        p.plain.push(true);
        p.first_use.push(tokens.clone());
    }
    p.lhs = names.iter().map(|(n, _)| n.clone()).collect();

    // Ranges, then the intermediates' names (so a read before the definition is named).
    let mut ranges: Vec<(usize, usize, TokenStream, bool)> = Vec::new();
    for s in stmts {
        if let syn::Stmt::Local(l) = s {
            match range(l) {
                Err(e) => p.errors.0.push(e),
                Ok((id, n)) => {
                    let key = id.to_string();
                    if p.param(&id).is_some() {
                        p.errors
                            .push(&id, format!("`{key}` is a tensor, not an index variable"));
                    } else if let Some(&v) = p.by_name.get(&key) {
                        let why = if p.indices[v].kind == IndexKind::Spatial {
                            format!("`{key}` is an index of the output `{out_name}`, whose shape gives its extent; a range is for an index that is reduced over")
                        } else {
                            format!("the range of `{key}` is given twice")
                        };
                        p.errors.push(&id, why);
                    } else {
                        let v = p.indices.len();
                        p.by_name.insert(key.clone(), v);
                        p.indices.push(Index {
                            name: key,
                            kind: IndexKind::Reduction,
                        });
                        p.plain.push(true);
                        p.first_use.push(id.to_token_stream());
                        ranges.push((v, n, l.to_token_stream(), false));
                    }
                }
            }
        }
    }
    for s in &stmts[..out_stmt] {
        if let syn::Stmt::Expr(syn::Expr::Assign(a), _) = s {
            if let Some(b) = lhs_base(&a.left) {
                if p.param(b).is_none() && !p.temps.knows(b) {
                    p.temps.list.push(Temp {
                        name: b.to_string(),
                        dims: Vec::new(),
                        defined: false,
                        used: false,
                        tokens: a.left.to_token_stream(),
                    });
                }
            }
        }
    }

    let mut stages: Vec<IrStage> = Vec::new();
    let mut out_body = None;
    let mut epilogue = Vec::new();
    for (n, s) in stmts.iter().enumerate() {
        if matches!(s, syn::Stmt::Local(_)) {
            continue;
        }
        if n > out_stmt {
            if let Some(e) = p.epilogue_statement(s) {
                epilogue.push(e);
            }
            continue;
        }
        if n == out_stmt {
            if let Some(op) = out_op {
                p.errors.push(
                    op,
                    format!("in a kernel with intermediates or reductions written as functions, the output's statement is an `=`: write a sum as `{out_name}[[..]] = sum(...);`"),
                );
                continue;
            }
            let dims: Vec<usize> = (0..p.lhs.len()).collect();
            let toks: Vec<TokenStream> = names.iter().map(|(_, t)| t.clone()).collect();
            out_body = p.statement(&dims, &toks, out_rhs);
            continue;
        }
        // An intermediate.
        let Some((op, lhs, rhs, op_tokens)) = p.assignment(s) else {
            continue;
        };
        let base = match split_access(lhs) {
            Ok((b, _)) => b,
            Err(e) => {
                p.errors.0.push(e);
                continue;
            }
        };
        if let Some(t) = p.param(base) {
            let what = if p.params[t].is_output {
                "the output"
            } else {
                "an input (`&Tensor`)"
            };
            p.errors.push(base, format!("`{base}` is {what}; before the output's statement only intermediates (names that are not parameters) are assigned"));
            continue;
        }
        if op != "=" {
            p.errors.push(
                op_tokens,
                format!("an intermediate is assigned with `=`: `{base}[[..]] = sum(...);` reduces, `{base}[[..]] = expr;` is elementwise"),
            );
            continue;
        }
        let Some(t) = p.temps.list.iter().position(|t| *base == t.name) else {
            continue;
        };
        if p.temps.list[t].defined {
            p.errors.push(
                base,
                format!(
                    "intermediate `{base}` is defined twice; give each intermediate its own name"
                ),
            );
            continue;
        }
        let Some(dims) = p.temp_lhs(lhs) else {
            continue;
        };
        let ids: Vec<usize> = dims.iter().map(|(v, _)| *v).collect();
        let toks: Vec<TokenStream> = dims.into_iter().map(|(_, t)| t).collect();
        p.temps.current = Some(t);
        let parsed = p.statement(&ids, &toks, rhs);
        p.temps.current = None;
        p.temps.list[t].dims = ids.clone();
        p.temps.list[t].defined = true;
        if let Some((reducer, over, body)) = parsed {
            stages.push(IrStage {
                name: base.to_string(),
                dims: ids,
                reducer,
                over,
                body,
            });
        }
    }

    let clean = p.errors.0.is_empty();
    if clean {
        for t in &p.temps.list {
            if !t.used {
                p.errors.push(
                    &t.tokens,
                    format!(
                        "intermediate `{}` is never used; use it in a later statement or remove it",
                        t.name
                    ),
                );
            }
        }
        for (v, _, tokens, _) in &ranges {
            if !p.used_index(*v) {
                p.errors.push(
                    tokens,
                    format!(
                        "index `{}` has a range but is never used",
                        p.indices[*v].name
                    ),
                );
            }
        }
        for i in 0..p.indices.len() {
            if !p.plain[i] {
                let n = &p.indices[i].name;
                p.errors.push(
                    p.first_use[i].clone(),
                    format!("the extent of index `{n}` is unknown: it appears only inside affine expressions; use it plainly in some access (e.g. `w[[{n}]]`) or give its range: `let {n} = 0..3;`"),
                );
            }
        }
        for (i, a) in p.params.iter().enumerate() {
            if !p.used[i] && !a.is_output {
                p.errors.push(
                    &a.name,
                    format!(
                        "parameter `{}` is never read by the kernel; remove it or use it",
                        a.name
                    ),
                );
            }
        }
    }
    p.errors.finish()?;
    let Some((reducer, over, mut body)) = out_body else {
        return Err(syn::Error::new(
            body_span,
            "the output's statement is invalid",
        ));
    };
    let stages = inline_elementwise(stages, &mut body, &mut epilogue);
    let rank = |i: usize| p.ranks[i].unwrap_or(0);
    Ok(Kernel {
        name: name.to_string(),
        params: p
            .params
            .iter()
            .enumerate()
            .map(|(i, d)| Param {
                name: d.name.to_string(),
                dtype: d.dtype,
                rank: rank(i),
                is_output: d.is_output,
            })
            .collect(),
        output: p.output,
        indices: p.indices,
        kind: if reducer.is_some() {
            BodyKind::Sum
        } else {
            BodyKind::Assign
        },
        body,
        epilogue,
        staged: Some(Box::new(Staged {
            stages,
            reducer,
            over,
            ranges: ranges.into_iter().map(|(v, n, _, _)| (v, n)).collect(),
        })),
    })
}

/// Writes each elementwise intermediate whose indices differ from those the reductions keep
/// (all of them where no intermediate reduces) into the statements after it that read it,
/// and drops it; the others keep their place, renumbered. An intermediate is always read
/// with the indices it was defined with, so its body is the value at the reader's point.
fn inline_elementwise(
    stages: Vec<IrStage>,
    body: &mut Expr,
    epilogue: &mut [Expr],
) -> Vec<IrStage> {
    let sorted = |d: &[usize]| {
        let mut d = d.to_vec();
        d.sort_unstable();
        d
    };
    let rows = stages
        .iter()
        .find(|s| s.reducer.is_some())
        .map(|s| sorted(&s.dims));
    // What each old intermediate becomes: its body, or a kept intermediate's new number.
    let mut now: Vec<Expr> = Vec::with_capacity(stages.len());
    let mut kept = Vec::new();
    for mut st in stages {
        st.body = substitute(&st.body, &now);
        if st.reducer.is_none() && rows.as_ref() != Some(&sorted(&st.dims)) {
            now.push(st.body);
        } else {
            now.push(Expr::Temp(kept.len()));
            kept.push(st);
        }
    }
    *body = substitute(body, &now);
    for e in epilogue.iter_mut() {
        *e = substitute(e, &now);
    }
    kept
}

/// `e` with every `Temp(t)` replaced by `by[t]`.
fn substitute(e: &Expr, by: &[Expr]) -> Expr {
    match e {
        Expr::Temp(t) => by.get(*t).cloned().unwrap_or(Expr::Temp(*t)),
        Expr::Lit(_) | Expr::Access(_) | Expr::Output => e.clone(),
        Expr::Neg(a) => Expr::Neg(Box::new(substitute(a, by))),
        Expr::Bin(op, a, b) => Expr::Bin(
            *op,
            Box::new(substitute(a, by)),
            Box::new(substitute(b, by)),
        ),
        Expr::Call(f, args) => Expr::Call(*f, args.iter().map(|a| substitute(a, by)).collect()),
    }
}

impl Parser<'_> {
    /// Whether index `v` is used by any statement parsed so far.
    fn used_index(&self, v: usize) -> bool {
        self.temps.seen.contains(&v)
    }

    /// The left side of an intermediate: distinct plain index variables, with their tokens.
    fn temp_lhs(&mut self, lhs: &syn::Expr) -> Option<Vec<(usize, TokenStream)>> {
        let (_, elems) = split_access(lhs).ok()?;
        let mut out: Vec<(usize, TokenStream)> = Vec::new();
        let mut ok = true;
        for e in elems {
            let ident = match strip_group(e) {
                syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
                _ => None,
            };
            let Some(id) = ident else {
                self.errors.push(
                    e,
                    "an intermediate is indexed by plain index variables, like `m[[i]]`",
                );
                ok = false;
                continue;
            };
            let Some(v) = self.index_var(id, Stage::Staged) else {
                ok = false;
                continue;
            };
            if out.iter().any(|(w, _)| *w == v) {
                self.errors.push(
                    id,
                    format!("index `{id}` appears twice on the left; each dimension needs its own index"),
                );
                ok = false;
                continue;
            }
            out.push((v, id.to_token_stream()));
        }
        ok.then_some(out)
    }

    /// The right side of a statement whose left keeps `dims`: a reduction `f(expr)` over the
    /// indices of `expr` not in `dims`, or an elementwise `expr` using only `dims`.
    fn statement(
        &mut self,
        dims: &[usize],
        dim_tokens: &[TokenStream],
        rhs: &syn::Expr,
    ) -> Option<(Option<Reducer>, Vec<usize>, Expr)> {
        let (reducer, inner) = match reducer_call(rhs) {
            Some((r, arg)) => (Some(r), arg),
            None => (None, rhs),
        };
        self.uses.clear();
        let mut seen = Vec::new();
        let body = self.value(inner, Stage::Staged, &mut seen);
        let uses = std::mem::take(&mut self.uses);
        for &(v, _) in &uses {
            if !self.temps.seen.contains(&v) {
                self.temps.seen.push(v);
            }
        }
        let body = body?;
        let mut ok = true;
        for (d, tokens) in dims.iter().zip(dim_tokens) {
            if !uses.iter().any(|(v, _)| v == d) {
                self.errors.push(
                    tokens,
                    format!(
                        "index `{}` on the left is not used on the right, so nothing defines the result along it",
                        self.indices[*d].name
                    ),
                );
                ok = false;
            }
        }
        let mut over: Vec<usize> = Vec::new();
        for (v, tokens) in &uses {
            if dims.contains(v) || over.contains(v) {
                continue;
            }
            if reducer.is_none() {
                let n = &self.indices[*v].name;
                self.errors.push(
                    tokens,
                    format!("index `{n}` is not on the left of `=`; reduce over it with `sum(...)`, `max(...)`, `min(...)`, `prod(...)` or `mean(...)`, e.g. `m[[i]] = max(x[[i, {n}]]);`"),
                );
                ok = false;
            }
            over.push(*v);
        }
        if let Some(r) = reducer {
            if over.is_empty() {
                self.errors.push(
                    rhs,
                    format!("`{}(...)` reduces over the indices on the right that are not on the left, and here there are none; keep an index off the left (`m[[i]] = {}(x[[i, j]]);`) or drop `{}`", r.name(), r.name(), r.name()),
                );
                ok = false;
            }
        }
        ok.then_some((reducer, over, body))
    }

    /// A read of intermediate `base`: the indices it was defined with.
    pub(super) fn temp_read(
        &mut self,
        base: &syn::Ident,
        elems: &[&syn::Expr],
        e: &syn::Expr,
    ) -> Option<Expr> {
        let t = self.temps.list.iter().position(|t| *base == t.name)?;
        if self.temps.current == Some(t) {
            self.errors.push(
                e,
                format!("intermediate `{base}` cannot read itself; a reduction is written `{base}[[..]] = max(...)`"),
            );
            return None;
        }
        if !self.temps.list[t].defined {
            self.errors.push(
                e,
                format!(
                    "intermediate `{base}` is used before it is defined; move its statement up"
                ),
            );
            return None;
        }
        let dims = self.temps.list[t].dims.clone();
        let names: Vec<String> = dims.iter().map(|&v| self.indices[v].name.clone()).collect();
        let got: Vec<String> = elems
            .iter()
            .map(|x| strip_group(x).to_token_stream().to_string())
            .collect();
        if got != names {
            self.errors.push(
                e,
                format!(
                    "intermediate `{base}` is defined as `{base}[[{}]]`; read it with the same indices",
                    names.join(", ")
                ),
            );
            return None;
        }
        for (&v, x) in dims.iter().zip(elems) {
            self.uses.push((v, x.to_token_stream()));
        }
        self.temps.list[t].used = true;
        Some(Expr::Temp(
            self.temps.list[..t].iter().filter(|t| t.defined).count(),
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::ir::{BodyKind, Expr, Reducer};
    use crate::parse_text;

    const SOFTMAX: &str = "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
                           y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];";

    #[test]
    fn softmax_has_two_stages() {
        let k = parse_text("softmax", SOFTMAX, None).unwrap();
        let names: Vec<_> = k.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["x", "y"]);
        assert_eq!(k.spatial(), [0, 1]);
        let st = k.staged.as_deref().unwrap();
        assert_eq!(st.stages.len(), 2);
        assert_eq!(st.stages[0].reducer, Some(Reducer::Max));
        assert_eq!(
            (st.stages[0].dims.clone(), st.stages[0].over.clone()),
            (vec![0], vec![1])
        );
        assert_eq!(st.reducer, None);
        assert_eq!(k.kind, BodyKind::Assign);
        let mut temps = 0;
        fn count(e: &Expr, n: &mut usize) {
            match e {
                Expr::Temp(_) => *n += 1,
                Expr::Bin(_, a, b) => {
                    count(a, n);
                    count(b, n);
                }
                Expr::Call(_, a) => a.iter().for_each(|a| count(a, n)),
                Expr::Neg(a) => count(a, n),
                _ => {}
            }
        }
        count(&k.body, &mut temps);
        assert_eq!(temps, 2);
        assert_eq!(
            k.to_string(),
            "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp((x[[i, j]] - m[[i]]))); y[[i, j]] = (exp((x[[i, j]] - m[[i]])) / s[[i]]);"
        );
        // Round trip through the text form, and the fingerprint ignores names.
        let again = parse_text("s", &k.to_string(), None).unwrap();
        assert_eq!(again.fingerprint(), k.fingerprint());
        let renamed = parse_text(
            "s",
            "a[[r]] = max(z[[r, c]]); b[[r]] = sum(exp(z[[r, c]] - a[[r]])); o[[r, c]] = exp(z[[r, c]] - a[[r]]) / b[[r]];",
            None,
        )
        .unwrap();
        assert_eq!(renamed.fingerprint(), k.fingerprint());
        let min = parse_text("s", &SOFTMAX.replace("max", "min"), None).unwrap();
        assert_ne!(min.fingerprint(), k.fingerprint());
    }

    /// An elementwise intermediate over other indices than the reductions keep is written
    /// into its readers: softmax with `e[[i, j]] = exp(..)` is the documented softmax.
    #[test]
    fn elementwise_intermediates_over_other_indices_are_written_into_their_readers() {
        let k = parse_text("softmax", SOFTMAX, None).unwrap();
        let with_e = parse_text(
            "softmax",
            "m[[i]] = max(x[[i, j]]); e[[i, j]] = exp(x[[i, j]] - m[[i]]); \
             s[[i]] = sum(e[[i, j]]); y[[i, j]] = e[[i, j]] / s[[i]];",
            None,
        )
        .unwrap();
        assert_eq!(with_e.to_string(), k.to_string());
        assert_eq!(with_e.fingerprint(), k.fingerprint());
        // With no reduction among the intermediates, every elementwise one is written in.
        let sq = parse_text(
            "k",
            "q[[i, j]] = x[[i, j]] * x[[i, j]]; y[[i]] = sum(q[[i, j]]);",
            None,
        )
        .unwrap();
        assert!(sq.staged.as_deref().unwrap().stages.is_empty());
        assert_eq!(sq.to_string(), "y[[i]] = sum((x[[i, j]] * x[[i, j]]));");
        // One that keeps the rows' indices stays (layer norm's `inv`), renumbered after an
        // inlined one.
        let ln = parse_text(
            "k",
            "d[[i, j]] = x[[i, j]] * 2.0; mu[[i]] = mean(d[[i, j]]); inv[[i]] = 1.0 / mu[[i]]; \
             y[[i, j]] = d[[i, j]] * inv[[i]];",
            None,
        )
        .unwrap();
        let st = ln.staged.as_deref().unwrap();
        let names: Vec<_> = st.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mu", "inv"]);
        assert_eq!(
            ln.to_string(),
            "mu[[i]] = mean((x[[i, j]] * 2.0)); inv[[i]] = (1.0 / mu[[i]]); y[[i, j]] = ((x[[i, j]] * 2.0) * inv[[i]]);"
        );
    }

    #[test]
    fn pooling_ranges_and_row_min() {
        let k = parse_text(
            "pool",
            "let r = 0..3; let s = 0..3; y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]]);",
            None,
        )
        .unwrap();
        let st = k.staged.as_deref().unwrap();
        assert_eq!(st.ranges, [(4, 3), (5, 3)]);
        assert_eq!(st.reducer, Some(Reducer::Max));
        assert_eq!(st.over, [4, 5]);
        let ext = crate::bind(&k, &[&[1, 2, 7, 7], &[1, 2, 4, 4]]).unwrap();
        assert_eq!(ext, [1, 2, 4, 4, 3, 3]);
        let k = parse_text("rowmin", "y[[i]] = min(x[[i, j]])", None).unwrap();
        assert_eq!(k.staged.as_deref().unwrap().reducer, Some(Reducer::Min));
        assert_eq!(k.kind, BodyKind::Sum);
        assert_eq!(k.reduction(), [1]);
    }

    #[test]
    fn misuses_are_reported() {
        let cases = [
            ("s[[i]] = sum(x[[i, j]] - m[[i]]); m[[i]] = max(x[[i, j]]); y[[i]] = s[[i]] + m[[i]]", "used before it is defined"),
            ("m[[i]] = max(x[[i, j]]); y[[i, j]] = x[[i, j]]", "never used"),
            ("m[[i]] = max(x[[i, j]]); y[[i]] = x[[i, j]] - m[[i]]", "reduce over it"),
            ("m[[i]] = max(x[[i]]); y[[i]] = m[[i]]", "there are none"),
            ("m[[i]] = max(x[[i, j]]); y[[i, j]] = x[[i, j]] - m[[j]]", "read it with the same indices"),
            ("m[[i]] = max(x[[i, j]] + m[[i]]); y[[i]] = m[[i]]", "cannot read itself"),
            ("y[[i]] = sqrt(mean(x[[i, j]]))", "whole right side"),
            ("let r = 1..3; y[[i]] = max(x[[i + r]])", "starts at 0"),
            ("let t = x[[i]]; y[[i]] = max(x[[i, j]])", "index its range"),
            ("y[[p]] = max(x[[2 * p + r]])", "give its range"),
            ("m[[i]] = max(x[[i, j]]); m[[i]] = min(x[[i, j]]); y[[i]] = m[[i]]", "defined twice"),
            ("m[[i]] = max(x[[i, j]]); y[[i]] += x[[i, j]] - m[[i]]", "is an `=`"),
        ];
        for (src, want) in cases {
            let err = parse_text("k", src, None)
                .map(|k| k.to_string())
                .unwrap_err();
            assert!(err.contains(want), "{src}: {err}");
        }
        let params = [("x".to_string(), false), ("y".to_string(), true)];
        let err = parse_text("k", "m[[i]] = max(x[[i, j]])", Some(&params)).unwrap_err();
        assert!(err.contains("no statement writes"), "{err}");
    }

    #[test]
    fn range_conflict_is_a_shape_error() {
        let k = parse_text("k", "let r = 0..3; y[[i]] = max(x[[i + r]] * w[[r]])", None).unwrap();
        let e = crate::bind(&k, &[&[8], &[4], &[6]]).unwrap_err();
        assert!(e.to_string().contains("let r = 0..3"), "{e}");
        assert!(crate::bind(&k, &[&[8], &[3], &[6]]).is_ok());
    }
}

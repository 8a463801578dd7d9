//! Stage 2: checks the signature, then hands the body to the language's parser
//! (`tensor_dsl_lang::parse_kernel`), which checks the statements. Every problem becomes a
//! `syn::Error` on the offending tokens; as many as possible are collected before giving up.

use crate::ast::{KernelFn, Param, TypedParam};
use quote::ToTokens;
use syn::ext::IdentExt;
use tensor_dsl_lang::ir::{DType, Kernel};
use tensor_dsl_lang::ParamDecl;

/// What the expansion needs: the tensor parameters and the kernel's IR.
pub struct Validated {
    /// The tensor parameters, in declaration order.
    pub params: Vec<TensorParam>,
    /// The IR; with `accumulate`, [`Kernel::accumulating`] of the body (one more input,
    /// last, which the generated code fills with a copy of the output).
    pub kernel: Kernel,
    /// `#[tensor_kernel(accumulate)]`: the output's old contents are added to the result.
    pub accumulate: bool,
}

/// A parameter that passed the checks: `name: &Tensor<T>` or `name: &mut Tensor<T>` with
/// `T` one of `f32`, `f16`, `bf16`, or a scalar `name: T`.
pub struct TensorParam {
    pub name: syn::Ident,
    pub is_output: bool,
    pub dtype: DType,
    /// A scalar `name: f32` (a rank-0 input; the body reads it as `name`).
    pub scalar: bool,
}

/// Collects errors (serde_derive's `Ctxt`).
#[derive(Default)]
struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    fn error(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.errors.push(syn::Error::new_spanned(tokens, msg));
    }

    fn push(&mut self, e: syn::Error) {
        self.errors.push(e);
    }

    fn finish(self) -> syn::Result<()> {
        let mut errors = self.errors.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(mut first) => {
                first.extend(errors);
                Err(first)
            }
        }
    }
}

/// Which side of the kernel a parameter is on, as far as its type tells.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Input,
    Output,
    /// The type is wrong in a way that does not say (e.g. `Vec<f32>`, by-value `Tensor`).
    Unknown,
}

const PARAM_TYPES: &str = "`&Tensor<T>` (an input) or `&mut Tensor<T>` (the output), with `T` \
                           one of `f32`, `f16`, `bf16`";

pub fn validate(f: &KernelFn) -> syn::Result<Validated> {
    let mut cx = Ctxt::default();
    let accumulate = check_attribute_args(&mut cx, f);
    check_signature(&mut cx, f);

    // Parameters: each one's name and role; errors for the rest.
    let mut decls: Vec<(syn::Ident, Role, &TypedParam, DType)> = Vec::new();
    // A parameter written as a pattern: the body cannot be checked meaningfully without it.
    let mut unnamed = false;
    // Scalar parameters (`alpha: f32`), which the body reads by name.
    let mut scalars: Vec<syn::Ident> = Vec::new();
    for p in &f.params {
        match p {
            Param::Receiver(r) => cx.error(
                r,
                "a kernel is a free function, not a method: remove `self` and move the \
                 function out of the `impl` block",
            ),
            Param::Typed(t) => {
                // One error per parameter: its pattern first, then its type.
                let Some(name) = param_name(&mut cx, t) else {
                    unnamed = true;
                    continue;
                };
                match scalar_type(t.ty()) {
                    Some(Ok(dtype)) => {
                        scalars.push(name.clone());
                        decls.push((name, Role::Input, t, dtype));
                        continue;
                    }
                    Some(Err(suggest)) => {
                        // The body's uses of it would only add more errors.
                        cx.error(
                            t.ty(),
                            format!(
                                "a scalar parameter is `f32`, `f16` or `bf16` (arithmetic is \
                                 `f32`): write `{name}: {suggest}`"
                            ),
                        );
                        unnamed = true;
                        continue;
                    }
                    None => {}
                }
                let (role, dtype) = match param_role(t.ty()) {
                    Ok(typed) => typed,
                    Err((role, e)) => {
                        cx.push(e);
                        (role, DType::F32)
                    }
                };
                decls.push((name, role, t, dtype));
            }
        }
    }

    let outputs: Vec<&(syn::Ident, Role, &TypedParam, DType)> =
        decls.iter().filter(|d| d.1 == Role::Output).collect();
    let unknown = unnamed || decls.iter().any(|d| d.1 == Role::Unknown);
    match outputs.as_slice() {
        [] if !unknown => cx.error(
            &f.sig.ident,
            format!(
                "kernel `{}` has no output: make the parameter that receives the result \
                 `&mut Tensor<f32>`",
                f.sig.ident
            ),
        ),
        [] | [_] => {}
        [(first, _, _, _), rest @ ..] => {
            for (name, _, t, _) in rest {
                cx.error(
                    &t.arg,
                    format!(
                        "a kernel has exactly one output and `{first}` already is one: \
                         make `{name}` an input, `{name}: &Tensor<f32>`"
                    ),
                );
            }
        }
    }

    // The body, when the parameters are clear enough for its errors to be meaningful.
    let mut kernel = None;
    if outputs.len() == 1 && !unnamed {
        let params: Vec<ParamDecl> = decls
            .iter()
            .map(|(name, role, _, dtype)| ParamDecl {
                name: name.clone(),
                is_output: *role == Role::Output,
                dtype: *dtype,
            })
            .collect();
        let name = f.sig.ident.unraw().to_string();
        let body_span = f.block.brace_token.span.join();
        // A scalar `alpha` is the rank-0 tensor `alpha[[]]` to the language.
        let block = if scalars.is_empty() {
            None
        } else {
            let tokens = scalar_reads(f.block.to_token_stream(), &scalars, &mut cx);
            match syn::parse2::<syn::Block>(tokens) {
                Ok(b) => Some(b),
                Err(e) => {
                    cx.push(e);
                    None
                }
            }
        };
        let stmts = block.as_ref().map_or(&f.block.stmts, |b| &b.stmts);
        match tensor_dsl_lang::parse_kernel(&name, &params, stmts, body_span) {
            Ok(k) => kernel = Some(k),
            Err(e) => cx.push(e),
        }
    }
    cx.finish()?;
    match kernel {
        Some(kernel) => Ok(Validated {
            params: decls
                .into_iter()
                .map(|(name, role, _, dtype)| TensorParam {
                    scalar: scalars.contains(&name),
                    name,
                    is_output: role == Role::Output,
                    dtype,
                })
                .collect(),
            kernel: if accumulate {
                kernel.accumulating()
            } else {
                kernel
            },
            accumulate,
        }),
        // Unreachable in practice: without errors there is exactly one output, so the body
        // was parsed. Kept as an error rather than a panic.
        None => Err(syn::Error::new_spanned(
            &f.sig.ident,
            "internal error in #[tensor_kernel]: the kernel was not parsed",
        )),
    }
}

/// The attribute's one optional argument, `accumulate`: whether the kernel adds its result
/// to what the output holds.
fn check_attribute_args(cx: &mut Ctxt, f: &KernelFn) -> bool {
    if f.args.is_empty() {
        return false;
    }
    if let Ok(id) = syn::parse2::<syn::Ident>(f.args.clone()) {
        if id == "accumulate" {
            return true;
        }
    }
    cx.error(
        &f.args,
        format!(
            "`#[tensor_kernel]` takes no arguments but `accumulate` (add the result to what \
             the output holds); options such as the device are given per call: \
             `{}::with(&opts)(...)`",
            f.sig.ident
        ),
    );
    false
}

fn check_signature(cx: &mut Ctxt, f: &KernelFn) {
    let sig = &f.sig;
    if let Some(t) = &sig.constness {
        cx.error(t, "a kernel cannot be a `const fn`: remove `const`");
    }
    if let Some(t) = &sig.asyncness {
        cx.error(
            t,
            "a kernel cannot be `async`: remove `async` (a kernel call returns when the \
             output is written)",
        );
    }
    if let Some(t) = &sig.unsafety {
        cx.error(
            t,
            "a kernel cannot be `unsafe`: remove `unsafe` (the generated code is safe)",
        );
    }
    if let Some(abi) = &sig.abi {
        cx.error(abi, "a kernel cannot have an ABI: remove `extern`");
    }
    if !sig.generics.params.is_empty() {
        cx.error(
            &sig.generics,
            format!(
                "a kernel cannot be generic: remove the generic parameters; its parameters are {PARAM_TYPES}"
            ),
        );
    }
    if let Some(w) = &sig.generics.where_clause {
        cx.error(w, "a kernel cannot have a `where` clause: remove it");
    }
    if let Some(v) = &sig.variadic {
        cx.error(
            v,
            format!("a kernel cannot be variadic: its parameters are {PARAM_TYPES}"),
        );
    }
    if let syn::ReturnType::Type(..) = &sig.output {
        cx.error(
            &sig.output,
            format!(
                "remove the return type: `#[tensor_kernel]` makes `{}` return \
                 `Result<(), tensor_dsl::Error>`",
                sig.ident
            ),
        );
    }
}

/// The parameter's name, or an error when it is a pattern rather than a plain name.
fn param_name(cx: &mut Ctxt, t: &TypedParam) -> Option<syn::Ident> {
    match t.pat() {
        syn::Pat::Ident(p) => {
            if let Some(r) = &p.by_ref {
                cx.error(
                    r,
                    "remove `ref`: a kernel parameter is a plain name, like `a: &Tensor<f32>`",
                );
            }
            if let Some(m) = &p.mutability {
                cx.error(
                    m,
                    "remove `mut`: a kernel parameter is a plain name, like `a: &Tensor<f32>`",
                );
            }
            if let Some((at, sub)) = &p.subpat {
                cx.error(
                    quote::quote!(#at #sub),
                    "remove the `@` pattern: a kernel parameter is a plain name, like `a: &Tensor<f32>`",
                );
            }
            // Even with one of those, the name still names a tensor for the body's checks.
            Some(p.ident.clone())
        }
        syn::Pat::Wild(w) => {
            cx.error(
                w,
                "give this parameter a name: the kernel's statements refer to tensors by name",
            );
            None
        }
        other => {
            cx.error(
                other,
                "a kernel parameter is a plain name, not a pattern: declare one parameter per \
                 tensor, like `a: &Tensor<f32>`",
            );
            None
        }
    }
}

/// For a plain number type: `Ok` with the element type of a scalar parameter (`f32`, `f16`,
/// `bf16`, or a path ending in one), `Err` with the type to suggest for other numbers
/// (`f64`, `i32`, ...); `None` for anything else.
fn scalar_type(ty: &syn::Type) -> Option<Result<DType, &'static str>> {
    let syn::Type::Path(p) = strip_type_group(ty) else {
        return None;
    };
    if p.qself.is_some() {
        return None;
    }
    let last = p.path.segments.last()?;
    if !last.arguments.is_empty() {
        return None;
    }
    let id = last.ident.to_string();
    if let Some(d) = DType::from_name(&id) {
        return Some(Ok(d));
    }
    match id.as_str() {
        "f64" | "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64"
        | "u128" | "usize"
            if p.path.segments.len() == 1 =>
        {
            Some(Err("f32"))
        }
        _ => None,
    }
}

/// `tokens` with every bare read of a scalar parameter `alpha` written `alpha[[]]` (a read
/// already followed by brackets is left as it is), spans kept.
fn scalar_reads(
    tokens: proc_macro2::TokenStream,
    scalars: &[syn::Ident],
    cx: &mut Ctxt,
) -> proc_macro2::TokenStream {
    use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = TokenStream::new();
    for (n, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Group(g) => {
                let mut inner = Group::new(g.delimiter(), scalar_reads(g.stream(), scalars, cx));
                inner.set_span(g.span());
                out.extend([TokenTree::Group(inner)]);
            }
            TokenTree::Ident(id) if scalars.contains(id) => {
                out.extend([tree.clone()]);
                let index = match trees.get(n + 1) {
                    Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket => Some(g),
                    _ => None,
                };
                if let Some(g) = index {
                    // Only `alpha[[]]` (rank 0) is a read of a scalar.
                    let empty = g.stream().into_iter().collect::<Vec<_>>();
                    let rank0 = matches!(
                        empty.as_slice(),
                        [TokenTree::Group(e)] if e.delimiter() == Delimiter::Bracket && e.stream().is_empty()
                    );
                    if !rank0 {
                        cx.error(
                            quote::quote!(#id #g),
                            format!(
                                "`{id}` is a scalar parameter: read it as `{id}`, without indices"
                            ),
                        );
                    }
                } else {
                    let mut empty = Group::new(Delimiter::Bracket, TokenStream::new());
                    empty.set_span(id.span());
                    let mut outer = Group::new(
                        Delimiter::Bracket,
                        TokenStream::from(TokenTree::Group(empty)),
                    );
                    outer.set_span(id.span());
                    out.extend([TokenTree::Group(outer)]);
                }
            }
            other => out.extend([other.clone()]),
        }
    }
    out
}

fn strip_type_group(mut ty: &syn::Type) -> &syn::Type {
    loop {
        match ty {
            syn::Type::Group(g) => ty = &g.elem,
            syn::Type::Paren(p) => ty = &p.elem,
            _ => return ty,
        }
    }
}

/// `Some((is_output, element type))` when `ty` is a valid tensor parameter type, `None`
/// otherwise.
pub fn tensor_param_type(ty: &syn::Type) -> Option<(bool, DType)> {
    match param_role(ty) {
        Ok((Role::Output, d)) => Some((true, d)),
        Ok((Role::Input, d)) => Some((false, d)),
        Ok((Role::Unknown, _)) | Err(_) => None,
    }
}

/// The role and element type a parameter's type gives it; on error, the role as far as it
/// is known.
fn param_role(ty: &syn::Type) -> Result<(Role, DType), (Role, syn::Error)> {
    let unsupported = || {
        syn::Error::new_spanned(
            ty,
            format!("unsupported parameter type: a kernel parameter is {PARAM_TYPES}"),
        )
    };
    match strip_type_group(ty) {
        syn::Type::Reference(r) => {
            let role = if r.mutability.is_some() {
                Role::Output
            } else {
                Role::Input
            };
            match tensor_path(&r.elem) {
                Some(path) => element_type(path).map(|d| (role, d)).map_err(|e| (role, e)),
                None => Err((role, unsupported())),
            }
        }
        other if tensor_path(other).is_some() => Err((
            Role::Unknown,
            syn::Error::new_spanned(
                ty,
                "pass tensors by reference: `&Tensor<f32>` for an input, `&mut Tensor<f32>` \
                 for the output",
            ),
        )),
        _ => Err((Role::Unknown, unsupported())),
    }
}

/// The path, when the type is a path whose last segment is `Tensor` (`Tensor<f32>`,
/// `tensor_dsl::Tensor<f32>`, ...).
fn tensor_path(ty: &syn::Type) -> Option<&syn::Path> {
    match strip_type_group(ty) {
        syn::Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .filter(|s| s.ident == "Tensor")
            .map(|_| &p.path),
        _ => None,
    }
}

/// The element type of a `...::Tensor<T>` path: `f32`, `f16` or `bf16`, written plainly or
/// as a path ending in one of them (`half::bf16`, `tensor_dsl::f16`).
fn element_type(path: &syn::Path) -> syn::Result<DType> {
    let Some(last) = path.segments.last() else {
        return Ok(DType::F32);
    };
    let args = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a,
        syn::PathArguments::None => return Err(syn::Error::new_spanned(
            path,
            "the element type is missing: write `Tensor<f32>` (or `Tensor<f16>`, `Tensor<bf16>`)",
        )),
        syn::PathArguments::Parenthesized(a) => {
            return Err(syn::Error::new_spanned(a, "write `Tensor<f32>`"))
        }
    };
    let mut types = args.args.iter();
    match (types.next(), types.next()) {
        (Some(syn::GenericArgument::Type(t)), None) => {
            let dtype = match strip_type_group(t) {
                syn::Type::Path(p) if p.qself.is_none() => p
                    .path
                    .segments
                    .last()
                    .filter(|s| s.arguments.is_empty())
                    .and_then(|s| DType::from_name(&s.ident.to_string())),
                _ => None,
            };
            dtype.ok_or_else(|| {
                syn::Error::new_spanned(
                    t,
                    "unsupported element type: tensors hold `f32`, `f16` or `bf16` \
                     (`tensor_dsl::f16`, `tensor_dsl::bf16`)",
                )
            })
        }
        _ => Err(syn::Error::new_spanned(
            args,
            "`Tensor` takes one element type: write `Tensor<f32>`",
        )),
    }
}

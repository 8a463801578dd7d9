//! Stage 1: the attribute's input as a typed view of the function, keeping the user's own
//! tokens so that every later diagnostic can point at them.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};

/// The function `#[tensor_kernel]` is attached to, with the attribute's arguments.
pub struct KernelFn {
    /// What was written inside `#[tensor_kernel(...)]` (must be empty).
    pub args: TokenStream,
    /// The user's attributes (doc comments, `cfg`, ...), kept on the generated function.
    pub attrs: Vec<syn::Attribute>,
    pub vis: syn::Visibility,
    /// The signature exactly as written.
    pub sig: syn::Signature,
    pub block: Box<syn::Block>,
    /// One entry per parameter, in declaration order.
    pub params: Vec<Param>,
}

/// What [`KernelFn::parse`] found.
pub enum Parsed {
    /// A function whose body is Rust syntax (the validator checks the rest).
    Fn(KernelFn),
    /// A function whose body is not Rust syntax: the function with an empty body, and why.
    BadBody(KernelFn, syn::Error),
}

/// A function whose body is kept as tokens (it does not parse as Rust).
struct OpaqueFn {
    attrs: Vec<syn::Attribute>,
    vis: syn::Visibility,
    sig: syn::Signature,
    body: Group,
}

impl Parse for OpaqueFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(syn::Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let body: Group = input.parse()?;
        if body.delimiter() != Delimiter::Brace || !input.is_empty() {
            return Err(input.error("expected the function's body"));
        }
        Ok(OpaqueFn {
            attrs,
            vis,
            sig,
            body,
        })
    }
}

/// Why a kernel's body is not Rust syntax, on the user's tokens: single brackets around
/// several indices, an assignment operator the language does not have (`max=`), or else
/// Rust's own parse error.
fn diagnose_body(body: &Group) -> syn::Error {
    if let Some(e) = find_body_mistake(body.stream()) {
        return e;
    }
    match syn::parse2::<syn::Block>(body.to_token_stream()) {
        Err(e) => syn::Error::new(
            e.span(),
            format!("the kernel's statements are not Rust syntax: {e}"),
        ),
        Ok(_) => syn::Error::new(body.span(), "the kernel's body could not be read"),
    }
}

fn find_body_mistake(stream: TokenStream) -> Option<syn::Error> {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    for (n, t) in tokens.iter().enumerate() {
        match t {
            // `c[i, j]`: a tensor indexed with single brackets around several indices.
            TokenTree::Group(g) if g.delimiter() == Delimiter::Bracket => {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                let nested = matches!(inner.as_slice(),
                    [TokenTree::Group(h)] if h.delimiter() == Delimiter::Bracket);
                let comma = inner
                    .iter()
                    .any(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','));
                if let (Some(TokenTree::Ident(name)), false, true) =
                    (n.checked_sub(1).and_then(|p| tokens.get(p)), nested, comma)
                {
                    let indices = g.stream().to_string().replace(" ,", ",");
                    return Some(syn::Error::new(
                        g.span(),
                        format!("index a tensor with double brackets: `{name}[[{indices}]]`"),
                    ));
                }
                if let Some(e) = find_body_mistake(g.stream()) {
                    return Some(e);
                }
            }
            // `m[[i]] max= x[[i, j]]`: an assignment operator the language does not have.
            TokenTree::Ident(op)
                if matches!(tokens.get(n + 1), Some(TokenTree::Punct(p)) if p.as_char() == '=')
                    && matches!(n.checked_sub(1).and_then(|p| tokens.get(p)),
                        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket) =>
            {
                return Some(syn::Error::new(
                    op.span(),
                    format!(
                        "`{op}=` is not an operator of the language: a reduction is a function \
                         of the indices only on the right, `m[[i]] = {op}(x[[i, j]]);` (`sum`, \
                         `max`, `min`, `prod`, `mean`), or `out[[...]] += expr` for an einsum sum"
                    ),
                ));
            }
            TokenTree::Group(g) => {
                if let Some(e) = find_body_mistake(g.stream()) {
                    return Some(e);
                }
            }
            _ => {}
        }
    }
    None
}

/// A parameter of the function.
pub enum Param {
    /// `self`, `&self`, `&mut self`, ...: never valid in a kernel, kept for its span.
    Receiver(syn::Receiver),
    /// `pattern: Type`.
    Typed(TypedParam),
}

/// A `pattern: Type` parameter.
pub struct TypedParam {
    /// The whole parameter, for diagnostics about it as a unit.
    pub arg: syn::PatType,
    /// The name, when the pattern is an identifier (possibly with `mut`, `ref`, `@ ..`,
    /// which the validator rejects).
    pub name: Option<syn::Ident>,
}

impl TypedParam {
    pub fn ty(&self) -> &syn::Type {
        &self.arg.ty
    }

    pub fn pat(&self) -> &syn::Pat {
        &self.arg.pat
    }
}

impl KernelFn {
    /// Parses the attribute's arguments and the item. Fails only when the item is not a
    /// function at all; everything else is left to the validator. A function whose body is
    /// not Rust syntax (`c[i, j] += ...`, `m[[i]] max= ...`) comes back as
    /// [`Parsed::BadBody`]: the function with an empty body, for the stubs, and the error
    /// that names the real problem.
    pub fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Parsed> {
        let f: syn::ItemFn = match syn::parse2(item.clone()) {
            Ok(f) => f,
            Err(_) => {
                return match syn::parse2::<OpaqueFn>(item.clone()) {
                    Ok(o) => {
                        let err = diagnose_body(&o.body);
                        let f = syn::ItemFn {
                            attrs: o.attrs,
                            vis: o.vis,
                            sig: o.sig,
                            block: Box::new(syn::parse_quote!({})),
                        };
                        Ok(Parsed::BadBody(Self::from_item(args, f), err))
                    }
                    Err(_) => Err(syn::Error::new_spanned(
                        &item,
                        "`#[tensor_kernel]` goes on a function, e.g. \
                         `fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) { ... }`",
                    )),
                };
            }
        };
        Ok(Parsed::Fn(Self::from_item(args, f)))
    }

    fn from_item(args: TokenStream, f: syn::ItemFn) -> KernelFn {
        let params = f
            .sig
            .inputs
            .iter()
            .map(|arg| match arg {
                syn::FnArg::Receiver(r) => Param::Receiver(r.clone()),
                syn::FnArg::Typed(t) => Param::Typed(TypedParam {
                    arg: t.clone(),
                    name: match &*t.pat {
                        syn::Pat::Ident(p) => Some(p.ident.clone()),
                        _ => None,
                    },
                }),
            })
            .collect();
        KernelFn {
            args,
            attrs: f.attrs,
            vis: f.vis,
            sig: f.sig,
            block: f.block,
            params,
        }
    }

    /// The typed (non-`self`) parameters, in declaration order.
    pub fn typed_params(&self) -> impl Iterator<Item = &TypedParam> {
        self.params.iter().filter_map(|p| match p {
            Param::Typed(t) => Some(t),
            Param::Receiver(_) => None,
        })
    }

    pub fn has_receiver(&self) -> bool {
        self.params.iter().any(|p| matches!(p, Param::Receiver(_)))
    }

    /// The user's `#[cfg(...)]` attributes: they must apply to the companion module too.
    pub fn cfg_attrs(&self) -> impl Iterator<Item = &syn::Attribute> {
        self.attrs.iter().filter(|a| a.path().is_ident("cfg"))
    }
}

//! Stage 1: the attribute's input as a typed view of the function, keeping the user's own
//! tokens so that every later diagnostic can point at them.

use proc_macro2::TokenStream;

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
    /// function at all; everything else is left to the validator.
    pub fn parse(args: TokenStream, item: TokenStream) -> syn::Result<KernelFn> {
        let f: syn::ItemFn = syn::parse2(item.clone()).map_err(|_| {
            syn::Error::new_spanned(
                &item,
                "`#[tensor_kernel]` goes on a function, e.g. \
                 `fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) { ... }`",
            )
        })?;
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
        Ok(KernelFn {
            args,
            attrs: f.attrs,
            vis: f.vis,
            sig: f.sig,
            block: f.block,
            params,
        })
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

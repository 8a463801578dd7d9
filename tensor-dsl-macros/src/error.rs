//! What the macro emits when the kernel is wrong: the `compile_error!`s, plus a stand-in
//! for everything the real expansion defines — the function with the macro's own syntax
//! stripped and a trivial body, and its companion module with `kernel()` and `with()` — so
//! that the IDE keeps working and callers of `name(...)`, `name::kernel()` and
//! `name::with(..)` type-check: only the real diagnostics show, no cascade of "cannot find
//! function" errors.

use crate::ast::KernelFn;
use crate::expand::tensor_ref;
use crate::expand::{closure_args, companion_mod, result_type, Companion};
use crate::valid::tensor_param_type;
use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;
use tensor_dsl_lang::ir::{BodyKind, Expr, Kernel};
use tensor_dsl_lang::tokens::kernel_tokens;

/// The item could not even be read as a function: the error and the item unchanged.
pub fn unparsed(err: syn::Error, item: TokenStream) -> TokenStream {
    let errors = err.into_compile_error();
    quote! {
        #errors
        #item
    }
}

/// The errors, the stub function and (unless it is a method) the stub companion module.
pub fn fallback(err: syn::Error, f: &KernelFn) -> TokenStream {
    let errors = err.into_compile_error();
    let stub = stub_fn(f);
    // A method (with `self`) most likely sits in an `impl` block, where a module would be
    // one more error.
    let companion = if f.has_receiver() {
        quote!()
    } else {
        stub_companion(f)
    };
    quote! {
        #errors
        #stub
        #companion
    }
}

/// The user's function with the signature the real expansion gives it and a body that
/// does nothing.
fn stub_fn(f: &KernelFn) -> TokenStream {
    let mut sig = f.sig.clone();
    sig.constness = None;
    sig.asyncness = None;
    sig.unsafety = None;
    sig.abi = None;
    sig.variadic = None;
    let ret = result_type();
    sig.output = syn::parse_quote!(-> #ret);
    for arg in sig.inputs.iter_mut() {
        if let syn::FnArg::Typed(t) = arg {
            *t.ty = stub_type(&t.ty);
        }
    }
    let attrs = &f.attrs;
    let vis = &f.vis;
    quote! {
        #(#attrs)*
        #[allow(unused_variables, unused_mut, dead_code)]
        #vis #sig {
            ::core::result::Result::Ok(())
        }
    }
}

/// `name::kernel()` returning a placeholder (never run: the crate does not compile) and
/// `name::with(&opts)` returning a closure that does nothing.
fn stub_companion(f: &KernelFn) -> TokenStream {
    let placeholder = Kernel {
        name: f.sig.ident.unraw().to_string(),
        params: Vec::new(),
        output: 0,
        indices: Vec::new(),
        kind: BodyKind::Assign,
        body: Expr::Lit(0.0),
        epilogue: Vec::new(),
        staged: None,
    };
    let mut uses_user_types = false;
    let types: Vec<TokenStream> = f
        .typed_params()
        .map(|p| match tensor_param_type(p.ty()) {
            Some((is_output, dtype)) => tensor_ref(is_output, dtype),
            None => {
                uses_user_types = true;
                let ty = stub_type(p.ty());
                quote!(#ty)
            }
        })
        .collect();
    // The user's own types are written relative to the parent module.
    let prelude = if uses_user_types {
        quote! {
            #[allow(unused_imports)]
            use super::*;
        }
    } else {
        quote!()
    };
    let args = closure_args(types.len());
    companion_mod(
        f,
        &Companion {
            kernel: kernel_tokens(&placeholder, &quote!(::tensor_dsl::ir)),
            generics: f.sig.generics.clone(),
            types,
            closure: quote! {
                move |#(#args),*| {
                    let _ = &opts;
                    ::core::result::Result::Ok(())
                }
            },
            prelude,
        },
    )
}

/// A parameter type for the stubs: as written, except that `Tensor<anything>` becomes
/// `Tensor<f32>` (other element types may not implement `Element`, which would be one more
/// error) and `impl Trait` / `_` become `()` (not allowed in `Fn(...)`).
fn stub_type(ty: &syn::Type) -> syn::Type {
    match ty {
        syn::Type::Reference(r) => {
            let mut r = r.clone();
            *r.elem = stub_type(&r.elem);
            syn::Type::Reference(r)
        }
        syn::Type::Group(g) => stub_type(&g.elem),
        syn::Type::Paren(p) => stub_type(&p.elem),
        syn::Type::Path(p)
            if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "Tensor") =>
        {
            let mut p = p.clone();
            if let Some(last) = p.path.segments.last_mut() {
                last.arguments = syn::PathArguments::AngleBracketed(syn::parse_quote!(<f32>));
            }
            syn::Type::Path(p)
        }
        syn::Type::ImplTrait(_) | syn::Type::Infer(_) => syn::parse_quote!(()),
        other => other.clone(),
    }
}

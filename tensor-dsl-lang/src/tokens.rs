//! Rust code that rebuilds a [`Kernel`] at run time: the macro embeds the IR it validated
//! at compile time instead of parsing the statement again in the user's program.

use crate::ir::{Access, Affine, BodyKind, DType, Expr, IndexKind, Kernel, Reducer};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

/// An expression of type `Kernel`, with the IR types named through `krate` (e.g.
/// `::tensor_dsl::ir`).
pub fn kernel_tokens(k: &Kernel, krate: &TokenStream) -> TokenStream {
    let name = &k.name;
    let params = k.params.iter().map(|p| {
        let n = &p.name;
        let dtype = match p.dtype {
            DType::F32 => quote!(#krate::DType::F32),
            DType::F16 => quote!(#krate::DType::F16),
            DType::BF16 => quote!(#krate::DType::BF16),
        };
        let rank = p.rank;
        let out = p.is_output;
        quote!(#krate::Param { name: ::std::string::String::from(#n), dtype: #dtype, rank: #rank, is_output: #out })
    });
    let indices = k.indices.iter().map(|i| {
        let n = &i.name;
        let kind = match i.kind {
            IndexKind::Spatial => quote!(#krate::IndexKind::Spatial),
            IndexKind::Reduction => quote!(#krate::IndexKind::Reduction),
        };
        quote!(#krate::Index { name: ::std::string::String::from(#n), kind: #kind })
    });
    let output = k.output;
    let kind = match k.kind {
        BodyKind::Sum => quote!(#krate::BodyKind::Sum),
        BodyKind::Assign => quote!(#krate::BodyKind::Assign),
    };
    let body = expr_tokens(&k.body, krate);
    let epilogue = k.epilogue.iter().map(|e| expr_tokens(e, krate));
    let staged = match k.staged.as_deref() {
        None => quote!(::core::option::Option::None),
        Some(st) => {
            let stages = st.stages.iter().map(|s| {
                let n = &s.name;
                let dims = &s.dims;
                let over = &s.over;
                let reducer = reducer_tokens(s.reducer, krate);
                let body = expr_tokens(&s.body, krate);
                quote!(#krate::Stage {
                    name: ::std::string::String::from(#n),
                    dims: ::std::vec![#(#dims),*],
                    reducer: #reducer,
                    over: ::std::vec![#(#over),*],
                    body: #body,
                })
            });
            let reducer = reducer_tokens(st.reducer, krate);
            let over = &st.over;
            let ranges = st.ranges.iter().map(|(v, n)| quote!((#v, #n)));
            quote!(::core::option::Option::Some(::std::boxed::Box::new(#krate::Staged {
                stages: ::std::vec![#(#stages),*],
                reducer: #reducer,
                over: ::std::vec![#(#over),*],
                ranges: ::std::vec![#(#ranges),*],
            })))
        }
    };
    quote! {
        #krate::Kernel {
            name: ::std::string::String::from(#name),
            params: ::std::vec![#(#params),*],
            output: #output,
            indices: ::std::vec![#(#indices),*],
            kind: #kind,
            body: #body,
            epilogue: ::std::vec![#(#epilogue),*],
            staged: #staged,
        }
    }
}

fn reducer_tokens(r: Option<Reducer>, krate: &TokenStream) -> TokenStream {
    match r {
        None => quote!(::core::option::Option::None),
        Some(r) => {
            let r = format_ident!("{}", format!("{r:?}"));
            quote!(::core::option::Option::Some(#krate::Reducer::#r))
        }
    }
}

fn affine_tokens(a: &Affine, krate: &TokenStream) -> TokenStream {
    let terms = a.terms.iter().map(|(v, c)| quote!((#v, #c)));
    let offset = a.offset;
    quote!(#krate::Affine { terms: ::std::vec![#(#terms),*], offset: #offset })
}

fn expr_tokens(e: &Expr, krate: &TokenStream) -> TokenStream {
    match e {
        Expr::Lit(v) => {
            let lit = Literal::f64_suffixed(*v);
            quote!(#krate::Expr::Lit(#lit))
        }
        Expr::Access(Access { tensor, dims }) => {
            let dims = dims.iter().map(|d| affine_tokens(d, krate));
            quote!(#krate::Expr::Access(#krate::Access { tensor: #tensor, dims: ::std::vec![#(#dims),*] }))
        }
        Expr::Output => quote!(#krate::Expr::Output),
        Expr::Temp(t) => quote!(#krate::Expr::Temp(#t)),
        Expr::Neg(a) => {
            let a = expr_tokens(a, krate);
            quote!(#krate::Expr::Neg(::std::boxed::Box::new(#a)))
        }
        Expr::Bin(op, a, b) => {
            let op = format_ident!("{}", format!("{op:?}"));
            let a = expr_tokens(a, krate);
            let b = expr_tokens(b, krate);
            quote!(#krate::Expr::Bin(#krate::BinOp::#op, ::std::boxed::Box::new(#a), ::std::boxed::Box::new(#b)))
        }
        Expr::Call(f, args) => {
            let f = format_ident!("{}", format!("{f:?}"));
            let args = args.iter().map(|a| expr_tokens(a, krate));
            quote!(#krate::Expr::Call(#krate::Func::#f, ::std::vec![#(#args),*]))
        }
    }
}

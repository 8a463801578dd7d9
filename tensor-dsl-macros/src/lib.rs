//! The `#[tensor_kernel]` attribute of [tensor-dsl]. Depend on `tensor-dsl` and write
//! `use tensor_dsl::tensor_kernel;` rather than depending on this crate: the expansion names
//! `::tensor_dsl`, and the facade pins this crate's exact version.
//!
//! ```ignore
//! use tensor_dsl::{tensor_kernel, Tensor};
//!
//! /// c = a · b
//! #[tensor_kernel]
//! pub fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
//!     c[[i, j]] += a[[i, k]] * b[[k, j]];
//! }
//!
//! matmul(&a, &b, &mut c)?;                    // returns Result<(), tensor_dsl::Error>
//! let ir = matmul::kernel();                  // &'static tensor_dsl::Kernel
//! matmul::with(&opts)(&a, &b, &mut c)?;       // explicit tensor_dsl::Options
//! ```
//!
//! (Runnable examples live in `tensor_dsl`'s documentation.)
//!
//! # What the attribute checks
//!
//! The function must be a plain `fn` (not `const`, `async`, `unsafe`, `extern`, generic,
//! or a method), without a return type, whose parameters are plain names of type
//! `&Tensor<f32>` (inputs) or `&mut Tensor<f32>` (exactly one output). Its statements are
//! checked by the kernel language's parser (`tensor_dsl_lang::parse_kernel`): every
//! mistake is a compile error pointing at the offending tokens.
//!
//! The attribute takes no arguments but one: `#[tensor_kernel(accumulate)]` adds the
//! kernel's result to what the output holds (`Kernel::accumulating`; the generated calls
//! pass a copy of the output as the last input).
//!
//! # What it generates
//!
//! * the function itself, with the same attributes, visibility, name and parameters,
//!   returning `Result<(), tensor_dsl::Error>`: it runs the kernel with default options;
//! * a module of the same name and visibility holding `kernel()`, the IR (validated at
//!   compile time, rebuilt once at run time), and `with(&opts)`, which returns a closure
//!   taking the same tensors and running the kernel with those options.
//!
//! When the kernel is wrong, the macro emits the errors together with stand-ins for both
//! (same signatures, bodies that do nothing) so that only the real diagnostics show.
//!
//! # Stages
//!
//! `ast.rs` (a typed view of the function) → `valid.rs` (checks) → `expand.rs` (code), each
//! returning `syn::Result`; `error.rs` turns a failure into diagnostics plus stand-ins.
//!
//! [tensor-dsl]: https://docs.rs/tensor-dsl

mod ast;
mod error;
mod expand;
mod valid;

use proc_macro::TokenStream;

/// Turns a function whose body is tensor-dsl statements into a kernel: the function keeps
/// its name and parameters and returns `Result<(), tensor_dsl::Error>`, and a module of the
/// same name gets `kernel()` (the IR) and `with(&opts)` (the call with explicit options).
/// The language (statements, built-ins, padding, element types) is documented at the root
/// of the `tensor_dsl` crate.
#[proc_macro_attribute]
pub fn tensor_kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = proc_macro2::TokenStream::from(args);
    let item = proc_macro2::TokenStream::from(item);
    let f = match ast::KernelFn::parse(args, item.clone()) {
        Ok(ast::Parsed::Fn(f)) => f,
        Ok(ast::Parsed::BadBody(f, e)) => return error::fallback(e, &f).into(),
        Err(e) => return error::unparsed(e, item).into(),
    };
    valid::validate(&f)
        .and_then(|v| expand::expand(&f, &v))
        .unwrap_or_else(|e| error::fallback(e, &f))
        .into()
}

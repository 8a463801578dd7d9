//! The tensor-dsl language: syntax → validated IR, shared by the `#[tensor_kernel]` macro,
//! the runtime and the command-line tool, so all three accept exactly the same kernels.
//!
//! Users depend on `tensor-dsl`, which re-exports what they need from here.
//!
//! ```
//! let k = tensor_dsl_lang::parse_text("dot", "s[[]] += x[[i]] * y[[i]]", None).unwrap();
//! assert_eq!(k.to_string(), "s[[]] += (x[[i]] * y[[i]]);");
//! ```

pub mod bind;
pub mod ir;
pub mod parse;
pub mod tokens;

pub use bind::{bind, ExtentConflict, ShapeError};
pub use parse::{parse_kernel, parse_text, ParamDecl};

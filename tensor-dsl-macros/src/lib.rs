//! `#[tensor_kernel]` (stub, being written).
use proc_macro::TokenStream;
#[proc_macro_attribute]
pub fn tensor_kernel(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

//! tensor-dsl: write a tensor kernel as one einsum-style statement inside Rust, get it
//! compiled for the CPU (generated C, OpenMP) or an NVIDIA GPU (CUDA C, NVRTC, `cudarc`),
//! with schedules tuned at build time, at the first call, or shipped in the binary.
//!
//! ```
//! use tensor_dsl::{tensor_kernel, Tensor};
//!
//! /// c = a · b
//! #[tensor_kernel]
//! pub fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
//!     c[[i, j]] += a[[i, k]] * b[[k, j]];
//! }
//!
//! let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = Tensor::from_vec(vec![3, 1], vec![1.0f32, 1.0, 1.0])?;
//! let mut c = Tensor::<f32>::zeros(&[2, 1]);
//! matmul(&a, &b, &mut c)?;
//! assert_eq!(c.as_slice(), &[6.0, 15.0]);
//! // The IR, for build scripts and tools:
//! assert_eq!(matmul::kernel().indices.len(), 3);
//! // Explicit options:
//! matmul::with(&tensor_dsl::Options::new().device(tensor_dsl::Device::Reference))(&a, &b, &mut c)?;
//! # Ok::<(), tensor_dsl::Error>(())
//! ```

pub mod autotune;
pub mod backend;
pub mod build;
pub mod codegen;
pub mod device_tensor;
pub mod dispatch;
mod error;
pub mod features;
pub mod files;
pub mod lower;
pub mod measure;
mod options;
pub mod records;
pub mod reference;
pub mod runtime;
pub mod template;
pub mod tensor;
pub mod tune_once;
pub mod tuned;

pub use device_tensor::DeviceTensor;
pub use error::Error;
pub use half::{bf16, f16};
pub use options::{Device, Options, TunePolicy};
pub use tensor::{
    Buffer, Data, DataMut, Element, Tensor, TensorMut, TensorRef, TensorView, TensorViewMut,
};
pub use tensor_dsl_macros::tensor_kernel;

/// The kernel IR, its parser (for text, as the CLI uses it) and shape binding.
pub mod ir {
    pub use tensor_dsl_lang::bind::{bind, ExtentConflict, Problem, ShapeError};
    pub use tensor_dsl_lang::ir::*;
    pub use tensor_dsl_lang::parse::parse_text;
}

/// The IR of a kernel, as returned by `my_kernel::kernel()`.
pub use ir::Kernel;

/// Embeds tuned records in the binary; they are registered before `main` runs and used by
/// every call whose (kernel, shapes, target, codegen version) they match.
///
/// - `include_tuned!()` embeds the build script's output
///   (`$OUT_DIR/tensor-dsl-tuned.jsonl`, written by [`build::tune`]);
/// - `include_tuned!("tuned/cpu.jsonl")` embeds a shipped records file, relative to the
///   crate root (`CARGO_MANIFEST_DIR`).
///
/// Use it once, at module level (e.g. in `main.rs`).
#[macro_export]
macro_rules! include_tuned {
    () => {
        $crate::__register_tuned!(::core::include_str!(::core::concat!(
            ::core::env!("OUT_DIR"),
            "/tensor-dsl-tuned.jsonl"
        )));
    };
    ($path:literal) => {
        $crate::__register_tuned!(::core::include_str!(::core::concat!(
            ::core::env!("CARGO_MANIFEST_DIR"),
            "/",
            $path
        )));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __register_tuned {
    ($text:expr) => {
        const _: () = {
            // A static constructor, as the platform's C runtime runs them before `main`.
            #[used]
            #[cfg_attr(
                any(target_os = "linux", target_os = "android", target_os = "freebsd"),
                link_section = ".init_array"
            )]
            #[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
            #[cfg_attr(windows, link_section = ".CRT$XCU")]
            static __TENSOR_DSL_TUNED: extern "C" fn() = {
                extern "C" fn register() {
                    $crate::tuned::register_embedded($text);
                }
                register
            };
        };
    };
}

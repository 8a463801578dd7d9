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
//!
//! # The language
//!
//! A kernel is a function with [`macro@tensor_kernel`] whose parameters are `&Tensor<T>`
//! inputs and one `&mut Tensor<T>` output (`T` is `f32`, [`f16`](struct@f16) or [`bf16`], per
//! parameter; arithmetic is `f32`). Its body is statements over tensors indexed with
//! double brackets:
//!
//! - **Statement 1**: a contraction `out[[..]] += expr` sums over every index that appears
//!   on the right only, and overwrites the output (as `numpy.einsum` does); or an
//!   elementwise `out[[..]] = expr`.
//! - **Later statements** are epilogues fused into the same kernel, updating the same
//!   output element: `+ - * /`, unary `-`, number literals, inputs indexed by output
//!   indices, and the built-ins `relu, gelu, sigmoid, tanh, exp, sqrt, max, min, log, abs,
//!   pow, erf, silu, rsqrt`.
//! - **Indices** are affine: `x[[n, c, 2 * p + r - 1, 2 * q + s - 1]]`. A plain index must
//!   match the tensor's extent; an affine one reads zero outside the tensor (padding).
//! - **`#[tensor_kernel(accumulate)]`** adds the kernel's whole result (epilogues included)
//!   to what the output holds, BLAS's `beta = 1`: see [`Kernel::accumulating`](ir::Kernel::accumulating).
//!
//! ```
//! use tensor_dsl::{tensor_kernel, Tensor};
//!
//! /// A dense layer: matmul, bias, GELU — one generated kernel.
//! #[tensor_kernel]
//! fn dense_gelu(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>, y: &mut Tensor<f32>) {
//!     y[[i, j]] += x[[i, k]] * w[[k, j]];
//!     y[[i, j]] = gelu(y[[i, j]] + bias[[j]]);
//! }
//!
//! /// 3x3 convolution, stride 1, zero padding 1.
//! #[tensor_kernel]
//! fn conv3x3(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
//!     y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]];
//! }
//!
//! let x = Tensor::from_vec(vec![1, 1, 3, 3], vec![1.0f32; 9])?;
//! let w = Tensor::from_vec(vec![1, 1, 3, 3], vec![1.0f32; 9])?;
//! let mut y = Tensor::<f32>::zeros(&[1, 1, 3, 3]);
//! conv3x3(&x, &w, &mut y)?;
//! assert_eq!(y.as_slice(), &[4.0, 6.0, 4.0, 6.0, 9.0, 6.0, 4.0, 6.0, 4.0]); // zero padding
//!
//! /// `y ← y + relu(x·w)`: a residual add, the old contents of `y` kept.
//! #[tensor_kernel(accumulate)]
//! fn residual(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
//!     y[[i, j]] += x[[i, k]] * w[[k, j]];
//!     y[[i, j]] = relu(y[[i, j]]);
//! }
//! let x = Tensor::from_vec(vec![1, 2], vec![1.0f32, -2.0])?;
//! let w = Tensor::from_vec(vec![2, 2], vec![1.0f32, 1.0, 0.0, 1.0])?;
//! let mut y = Tensor::from_vec(vec![1, 2], vec![10.0f32, 10.0])?;
//! residual(&x, &w, &mut y)?;
//! assert_eq!(y.as_slice(), &[11.0, 10.0]); // relu(1) = 1, relu(-1) = 0
//! # Ok::<(), tensor_dsl::Error>(())
//! ```
//!
//! # Errors
//!
//! Mistakes in the kernel are compile errors on your tokens (an index the right never
//! uses, a non-affine index, an unknown function, single brackets, ...). Mistakes at a
//! call are an [`Error`], never a panic: a wrong rank, an index bound to two extents, a
//! wrong output shape, a device that cannot run here, an unknown setting.
//!
//! ```
//! # use tensor_dsl::{tensor_kernel, Tensor};
//! # #[tensor_kernel]
//! # fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) { c[[i, j]] += a[[i, k]] * b[[k, j]]; }
//! let a = Tensor::<f32>::zeros(&[4, 8]);
//! let b = Tensor::<f32>::zeros(&[7, 2]);
//! let mut c = Tensor::<f32>::zeros(&[4, 2]);
//! let e = matmul(&a, &b, &mut c).unwrap_err();
//! assert!(e.to_string().contains("index `k` has extent 8"));
//! ```
//!
//! # Schedules: tuned at the first call, at build time, or shipped
//!
//! Each call's schedule comes from, in order: records embedded in the binary, the user
//! cache, tuning now (when allowed), the nearest tuned shape (if measured no slower), the
//! template's default. First-call tuning is off unless asked for:
//!
//! ```no_run
//! # use tensor_dsl::{tensor_kernel, Tensor};
//! # #[tensor_kernel]
//! # fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) { c[[i, j]] += a[[i, k]] * b[[k, j]]; }
//! # let (a, b, mut c) = (Tensor::<f32>::zeros(&[64, 64]), Tensor::<f32>::zeros(&[64, 64]), Tensor::<f32>::zeros(&[64, 64]));
//! use tensor_dsl::{Options, TunePolicy};
//! let tuned = matmul::with(&Options::new().tune(TunePolicy::FirstCall).trials(32));
//! tuned(&a, &b, &mut c)?; // tunes this shape (32 measurements), saves the records
//! tuned(&a, &b, &mut c)?; // runs the best schedule found
//! # Ok::<(), tensor_dsl::Error>(())
//! ```
//!
//! Build-time tuning ([`build::tune`] in `build.rs`) writes the best records into
//! `OUT_DIR`; shipping them is one line in `main.rs`:
//!
//! ```ignore
//! tensor_dsl::include_tuned!();                    // what build.rs tuned
//! tensor_dsl::include_tuned!("tuned/cuda.jsonl");  // or records exported with the CLI
//! ```
//!
//! # Settings and logging
//!
//! [`Options`] is a builder (device, tuning policy, trials, seconds, strategy); each
//! setting has an environment variable that overrides it (`TENSOR_DSL_DEVICE`,
//! `TENSOR_DSL_TUNE`, `TENSOR_DSL_TRIALS`, `TENSOR_DSL_TUNE_SECONDS`,
//! `TENSOR_DSL_STRATEGY`; also `TENSOR_DSL_CACHE`, `TENSOR_DSL_CACHE_MAX_MB`,
//! `TENSOR_DSL_NO_DISK_CACHE`, `TENSOR_DSL_CUDA_DEVICE`, `TENSOR_DSL_PTXAS`,
//! `TENSOR_DSL_LOG`). An unknown value is [`Error::InvalidSetting`], naming the accepted
//! ones. Decisions, compiles and tuning are [`tracing`](https://docs.rs/tracing) events
//! ([`log`]).
//!
//! # Modules for tools
//!
//! The code generators, templates, lowering, runtimes and measurement are public for the
//! workspace's CLI, bench and tests but hidden from these docs: they are not a stable
//! interface.

pub mod autotune;
#[doc(hidden)]
pub mod backend;
pub mod build;
#[doc(hidden)]
pub mod codegen;
pub mod device_tensor;
#[doc(hidden)]
pub mod dispatch;
mod error;
#[doc(hidden)]
pub mod features;
pub mod files;
pub mod log;
#[doc(hidden)]
pub mod lower;
#[doc(hidden)]
pub mod measure;
mod options;
pub mod records;
pub mod reference;
#[doc(hidden)]
pub mod runtime;
#[doc(hidden)]
pub mod template;
pub mod tensor;
pub mod testing;
pub mod transfer;
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

//! The one error type of the facade.

pub use tensor_dsl_lang::ShapeError;

/// Everything that can go wrong at a kernel call. Messages name the kernel, tensor and index
/// involved and say what to do.
///
/// `Debug` prints the message too, so `fn main() -> Result<(), tensor_dsl::Error>` ends
/// with `Error: kernel `matmul`: index `k` has extent 1024 from `a` ...`, not a struct dump.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The arguments' shapes do not fit the kernel (wrong rank, an index with two extents,
    /// an empty tensor, ...).
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// `Tensor::from_vec` was given a buffer whose length is not the product of the shape.
    #[error("tensor data has {len} elements but shape {shape:?} needs {expected}")]
    DataLength {
        shape: Vec<usize>,
        expected: usize,
        len: usize,
    },
    /// A tensor's element type is not the one the kernel declares.
    #[error("kernel `{kernel}` declares `{tensor}` as Tensor<{declared}>, but the call passed Tensor<{passed}>")]
    ElementType {
        kernel: String,
        tensor: String,
        declared: crate::ir::DType,
        passed: crate::ir::DType,
    },
    /// The shape's element count overflows `usize`.
    #[error("shape {shape:?} has too many elements")]
    ShapeOverflow { shape: Vec<usize> },
    /// The requested device cannot run kernels here.
    #[error("device `{device}` is not available: {reason}")]
    DeviceUnavailable { device: String, reason: String },
    /// `TENSOR_DSL_DEVICE` (or another setting) has a value we do not understand.
    #[error("invalid setting {name}={value:?}: {expected}")]
    InvalidSetting {
        name: String,
        value: String,
        expected: String,
    },
    /// Generated code failed to compile. This is a bug in tensor-dsl; please report it with
    /// the kernel and shapes.
    #[error("compiling kernel `{kernel}` with {compiler} failed:\n{log}")]
    Compile {
        kernel: String,
        compiler: String,
        log: String,
    },
    /// Loading or running compiled code failed (for CUDA: a launch that the driver refused
    /// or a kernel that faulted, with the CUDA error's name and text).
    #[error("backend error in kernel `{kernel}`: {message}")]
    Backend { kernel: String, message: String },
    /// A device operation outside any kernel (allocation, copy, synchronization) failed.
    #[error("`{device}` device error: {message}")]
    Device { device: String, message: String },
    /// A file tensor-dsl was asked to write (records, their lock, a cache file) is not a
    /// regular file: writing replaces a file, which would destroy a device, FIFO, socket or
    /// directory. `resolved` is `path` followed through symbolic links.
    #[error("{}", not_a_file(path, resolved, kind))]
    NotAFile {
        path: std::path::PathBuf,
        resolved: std::path::PathBuf,
        kind: String,
    },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

fn not_a_file(path: &std::path::Path, resolved: &std::path::Path, kind: &str) -> String {
    let via = if path == resolved {
        String::new()
    } else {
        format!(" (a link to {})", resolved.display())
    };
    format!(
        "cannot write {}{via}: it is a {kind}, not a regular file, and writing would replace it; give the path of a regular file (or /dev/null to save nothing)",
        path.display()
    )
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
